#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    memlint_fuzz::checks::fixes(data);
});
