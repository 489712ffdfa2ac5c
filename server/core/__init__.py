"""The service's core, with no gRPC in it: sessions (the in-process API), the session
table, admission and memory, model instances, gears, dynamic batching and the model
repository."""
