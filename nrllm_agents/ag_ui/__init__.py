"""AG-UI (docs.ag-ui.com): the protocol React and JavaScript front ends (CopilotKit, the
``@ag-ui/client`` ``HttpAgent``) speak, as a view of our runs: docs/howto/ag-ui.md."""
