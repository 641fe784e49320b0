"""Generated protobuf and gRPC stubs of the jobwire.v1 API. Do not edit: run scripts/gen-polyglot.sh."""
