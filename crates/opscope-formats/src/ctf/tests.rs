//! Tests of the CTF reader: hand-made traces for the mapping rules and the decoder's
//! edge cases, and the shared real traces against babeltrace2 / babeltrace 1.5.
