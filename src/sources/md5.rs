//! MD5 for the BOINC GUI RPC login only: the client asks for `md5(nonce + password)` in
//! hex. It is the peer's protocol, not a security choice. The digest comes from
//! the `md-5` crate; this is the glue that writes it as the client wants it.

use std::fmt::Write as _;

use md5::{Digest as _, Md5};

/// The MD5 digest of `data`, as 32 lower-case hex digits.
pub fn hex_digest(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .fold(String::with_capacity(32), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_1321_test_suite() {
        for (input, want) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(hex_digest(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn boinc_login_hash_matches_the_real_client() {
        // A nonce and password from a captured login that the client accepted.
        assert_eq!(
            hex_digest(b"1795316860.009667secretpw"),
            "69a3b5c032d620c9eb110b5b579dd87a"
        );
    }
}
