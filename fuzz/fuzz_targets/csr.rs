#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| edgekcm::fuzzing::csr(data));
