//! llama.cpp's GBNF grammars, rewritten into llguidance's Lark syntax (which has the same
//! operators but a different spelling of rules, classes and comments): `name ::= ...` becomes
//! `name : ...` (`root` is `start`), `[a-z]` becomes `/[a-z]/`, `.` any character, `#`
//! comments are dropped. Strings, groups, `|`, `* + ?` and `{m,n}` carry over as they are.

/// Most bytes of GBNF taken (a bigger grammar is refused before it is read).
pub const MAX_GBNF_BYTES: usize = 256 << 10;

/// `gbnf` as a Lark grammar, or a one-line error naming where it is malformed.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String, String> {
    if gbnf.len() > MAX_GBNF_BYTES {
        return Err(format!(
            "the GBNF grammar is over the limit of {MAX_GBNF_BYTES} bytes"
        ));
    }
    let chars: Vec<char> = gbnf.chars().collect();
    let mut out = String::with_capacity(gbnf.len() + 64);
    let mut i = 0;
    let mut depth = 0usize;
    let mut rules = 0usize;
    let mut has_root = false;
    let at = |i: usize| format!("GBNF grammar, character {i}");
    while i < chars.len() {
        let c = chars[i];
        match c {
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                if i >= chars.len() {
                    return Err(format!("{}: a string is not closed", at(start)));
                }
                i += 1;
                out.extend(&chars[start..i]);
                out.push(' ');
            }
            '[' => {
                let start = i;
                i += 1;
                out.push_str("/[");
                while i < chars.len() && chars[i] != ']' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        out.push('\\');
                        out.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    if chars[i] == '/' || chars[i] == '[' {
                        out.push('\\');
                    }
                    out.push(chars[i]);
                    i += 1;
                }
                if i >= chars.len() {
                    return Err(format!("{}: a character class is not closed", at(start)));
                }
                i += 1;
                out.push_str("]/ ");
            }
            '.' => {
                out.push_str("/(?s:.)/ ");
                i += 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                depth = match c {
                    '(' => depth + 1,
                    ')' => depth
                        .checked_sub(1)
                        .ok_or_else(|| format!("{}: ')' without '('", at(i)))?,
                    _ => depth,
                };
                out.push(c);
                out.push(' ');
                i += 1;
            }
            '{' => {
                let start = i;
                while i < chars.len() && chars[i] != '}' {
                    if !(chars[i].is_ascii_digit() || matches!(chars[i], '{' | ',' | ' ')) {
                        return Err(format!("{}: a malformed {{m,n}} repetition", at(start)));
                    }
                    i += 1;
                }
                if i >= chars.len() {
                    return Err(format!("{}: a repetition is not closed", at(start)));
                }
                i += 1;
                out.extend(chars[start..i].iter().filter(|c| **c != ' '));
                out.push(' ');
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let defines = chars[j..].starts_with(&[':', ':', '=']);
                if defines {
                    if depth != 0 {
                        return Err(format!("{}: a rule starts inside '('", at(start)));
                    }
                    rules += 1;
                    has_root |= name == "root";
                    out.push('\n');
                    out.push_str(&rule_name(&name));
                    out.push_str(": ");
                    i = j + 3;
                } else {
                    out.push_str(&rule_name(&name));
                    out.push(' ');
                }
            }
            _ => return Err(format!("{}: unexpected '{c}'", at(i))),
        }
    }
    if depth != 0 {
        return Err("GBNF grammar: a '(' is not closed".into());
    }
    if rules == 0 || !has_root {
        return Err("GBNF grammar: it has no 'root ::= ...' rule".into());
    }
    out.push('\n');
    Ok(out)
}

/// A GBNF rule name as a Lark rule name: `root` is `start`; others are lower case and
/// prefixed, written one-to-one (`-` as `_d`, `_` as `_u`, a capital `X` as `_cx`) so two
/// GBNF names never meet in one Lark name.
fn rule_name(name: &str) -> String {
    if name == "root" {
        return "start".into();
    }
    let mut s = String::from("g_");
    for c in name.chars() {
        match c {
            '-' => s.push_str("_d"),
            '_' => s.push_str("_u"),
            c if c.is_ascii_uppercase() => {
                s.push_str("_c");
                s.push(c.to_ascii_lowercase());
            }
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::gbnf_to_lark;

    #[test]
    fn rules_classes_strings_and_repetitions_are_rewritten() {
        let g = "# a comment\nroot ::= greeting (\" \" name)? [!.]{1,3}\ngreeting ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z/]* any-Thing\nany-Thing ::= .\n";
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(
            lark,
            "\nstart: g_greeting ( \" \" g_name ) ? /[!.]/ {1,3} \
             \ng_greeting: \"hi\" | \"hello\" \
             \ng_name: /[A-Z]/ /[a-z\\/]/ * g_any_d_cthing \
             \ng_any_d_cthing: /(?s:.)/ \n"
        );
    }

    #[test]
    fn malformed_grammars_are_refused_with_where() {
        for (g, says) in [
            ("root ::= \"a", "string is not closed"),
            ("root ::= [a-", "class is not closed"),
            ("root ::= (\"a\"", "'(' is not closed"),
            ("root ::= \"a\")", "')' without '('"),
            ("x ::= \"a\"", "no 'root"),
            ("root ::= \"a\" ; ", "unexpected ';'"),
            ("root ::= \"a\"{1,x}", "malformed"),
        ] {
            let e = gbnf_to_lark(g).unwrap_err();
            assert!(e.contains(says), "{g}: {e}");
        }
    }
}
