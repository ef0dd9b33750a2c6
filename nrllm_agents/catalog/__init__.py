"""What a run is built from, the catalog: connections (with their keys), saved agents, and the registry that
builds a run's provider and tools from settings, connections and MCP servers."""
