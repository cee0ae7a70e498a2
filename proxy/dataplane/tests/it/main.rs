//! In-process tests of the request path: a real `DataPlane` on the in-memory store
//! (`airlock_ledger::MemoryStore`), its real listener on 127.0.0.1, real loopback origins
//! and a real HTTP/1.1 client — no `airlock` process, no data directory beyond the CA's.

mod request_path;
