#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| edgekcm::fuzzing::command_line(data));
