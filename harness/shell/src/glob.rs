//! Shell pattern matching (`*`, `?`, `[...]`, backslash escapes) for `case` and the
//! `${X%p}` family. Patterns never match across nothing special: there is no pathname
//! expansion, so `/` and leading dots are ordinary characters here, as POSIX says for these
//! uses.

/// Escapes pattern characters so that `text` matches only itself.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `pattern` has an unescaped `*`, `?` or `[` (so it matches more than itself).
pub(crate) fn has_magic(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// `pattern` with its backslash escapes removed (the text a pattern without magic matches).
pub(crate) fn unescape(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Whether the whole of `text` matches `pattern`.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    match_chars(&p, &t)
}

/// `${X%p}` and friends: `text` without its shortest (or `longest`) matching prefix or
/// `suffix`; unchanged if nothing matches.
pub(crate) fn trim(text: &str, pattern: &str, suffix: bool, longest: bool) -> String {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let n = t.len();
    let cut: Vec<usize> = if longest == suffix {
        (0..=n).collect()
    } else {
        (0..=n).rev().collect()
    };
    for i in cut {
        if suffix && match_chars(&p, &t[i..]) {
            return t[..i].iter().collect();
        }
        if !suffix && match_chars(&p, &t[..i]) {
            return t[i..].iter().collect();
        }
    }
    text.to_string()
}

/// One pattern element: a literal character, `?`, `*` or a bracket expression.
enum Elem {
    Char(char),
    Any,
    Star,
    Class {
        negate: bool,
        items: Vec<(char, char)>,
    },
}

/// Reads the element at `p[i..]`, returning it and the number of chars it used.
fn elem(p: &[char], i: usize) -> (Elem, usize) {
    match p[i] {
        '\\' if i + 1 < p.len() => (Elem::Char(p[i + 1]), 2),
        '?' => (Elem::Any, 1),
        '*' => (Elem::Star, 1),
        '[' => bracket(p, i).unwrap_or((Elem::Char('['), 1)),
        c => (Elem::Char(c), 1),
    }
}

/// A bracket expression at `p[i]`, or None if it is not closed (then `[` is literal).
fn bracket(p: &[char], i: usize) -> Option<(Elem, usize)> {
    let mut j = i + 1;
    let negate = matches!(p.get(j), Some('!' | '^'));
    if negate {
        j += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *p.get(j)?;
        if c == ']' && !first {
            return Some((Elem::Class { negate, items }, j + 1 - i));
        }
        first = false;
        let (lo, used) = match c {
            '\\' => (*p.get(j + 1)?, 2),
            c => (c, 1),
        };
        j += used;
        if p.get(j) == Some(&'-') && p.get(j + 1).is_some_and(|c| *c != ']') {
            let (hi, used) = match p[j + 1] {
                '\\' => (*p.get(j + 2)?, 3),
                c => (c, 2),
            };
            items.push((lo, hi));
            j += used;
        } else {
            items.push((lo, lo));
        }
    }
}

/// Iterative matching with backtracking to the last `*` (linear in practice, no recursion).
fn match_chars(p: &[char], t: &[char]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() {
            let (e, used) = elem(p, pi);
            let ok = match e {
                Elem::Star => {
                    star = Some((pi + used, ti));
                    pi += used;
                    continue;
                }
                Elem::Any => ti < t.len(),
                Elem::Char(c) => t.get(ti) == Some(&c),
                Elem::Class { negate, items } => t
                    .get(ti)
                    .is_some_and(|c| items.iter().any(|(lo, hi)| lo <= c && c <= hi) != negate),
            };
            if ok {
                pi += used;
                ti += 1;
                continue;
            }
        } else if ti == t.len() {
            return true;
        }
        // Mismatch: let the last `*` swallow one more character, if there is one.
        match star {
            Some((after, matched)) if matched < t.len() => {
                star = Some((after, matched + 1));
                pi = after;
                ti = matched + 1;
            }
            _ => return false,
        }
    }
}
