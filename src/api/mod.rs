//! The `/v1` REST facade: reads from watch caches, writes to the API server.
