//! CUPTI activity records as the injected library decodes them (`--cupti`): arbitrary
//! bytes, and every prefix of them, give a record or an error, never a panic; decoding
//! is deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_record::cupti::activity::decode;

fuzz_target!(|data: &[u8]| {
    if let Ok(activity) = decode(data) {
        let again = decode(data).expect("decoding is deterministic");
        assert_eq!(format!("{activity:?}"), format!("{again:?}"));
    }
    for cut in 0..data.len().min(300) {
        let _ = decode(&data[..cut]);
    }
});
