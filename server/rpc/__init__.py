"""The gRPC layer over the core: the server process (app.py), the two servicers, request
decoding and status mapping (errors.py), interceptors, authentication and streams."""
