//! Go's string formatting where upstream's output must be matched byte for byte.

use std::fmt::Write as _;

/// Is `c` printed as itself by Go's `strconv.Quote` (`unicode.IsPrint`: letters, marks,
/// numbers, punctuation, symbols and the ASCII space)? Without Unicode's category tables this
/// treats controls, spaces other than U+0020, the format characters, private use and
/// noncharacters as unprintable, and every other code point (unassigned ones too) as
/// printable.
fn go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    let format = matches!(
        u,
        0xAD | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    );
    let private_use = matches!(u, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF);
    let noncharacter = matches!(u, 0xFDD0..=0xFDEF) || u & 0xFFFE == 0xFFFE;
    !(format || private_use || noncharacter)
}

/// Go's `%q` of a string (`strconv.Quote`): double quotes, `\"` and `\\`, the C escapes,
/// `\xHH` for other ASCII controls, `\uHHHH`/`\UHHHHHHHH` for other unprintable characters.
pub fn go_quote(s: &str) -> String {
    go_quote_bytes(s.as_bytes())
}

/// `strconv.Quote` of bytes that may not be UTF-8: as [`go_quote`], and each byte that is
/// not part of a UTF-8 character as `\xHH`.
pub fn go_quote_bytes(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            quote_char(&mut out, c);
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

fn quote_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        c if go_printable(c) => out.push(c),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        c if (c as u32) < 0x20 || c as u32 == 0x7F => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_of_unprintable_characters() {
        assert_eq!(go_quote(""), "\"\"");
        assert_eq!(go_quote("a b"), "\"a b\"");
        assert_eq!(
            go_quote("\t\n\r\u{7}\u{8}\u{b}\u{c}"),
            r#""\t\n\r\a\b\v\f""#
        );
        assert_eq!(go_quote("\u{0}\u{1f}\u{7f}"), r#""\x00\x1f\x7f""#);
        assert_eq!(
            go_quote("\u{85}\u{a0}\u{200b}\u{2028}"),
            r#""\u0085\u00a0\u200b\u2028""#
        );
        assert_eq!(go_quote("\u{feff}\u{e000}"), r#""\ufeff\ue000""#);
        assert_eq!(go_quote("\u{f0000}\u{e0001}"), r#""\U000f0000\U000e0001""#);
        assert_eq!(go_quote("é€😀"), "\"é€😀\"");
    }
}
