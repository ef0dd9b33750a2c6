"""What a run is set up with: connections (with their keys), saved agents, and the registry that
builds a run's provider and tools from settings, connections and MCP servers."""
