"""graphengine.engine: GE Core, the graph compiler (stages 1-4) and its load/execute glue."""
