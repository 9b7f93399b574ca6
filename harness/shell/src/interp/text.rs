//! `tr` and `grep`, as far as scripts that read `/proc` need them: `tr SET1 SET2` and
//! `tr -d SET` over bytes (NUL included), `grep [-qvFxis] [-e PAT] PAT [FILE...]` with basic
//! regular expressions (`.`, `*`, `^`, `$`, `[...]`, `\` escapes; no `\(\)` groups or
//! `\{\}` intervals, refused by name rather than misread).

use super::Shell;

/// The bytes of a `tr` set: `\\`, `\n`, `\t`, `\r`, octal `\NNN` (so `\0` is NUL) and ranges
/// `a-z`.
fn tr_set(spec: &str) -> Vec<u8> {
    let b = spec.as_bytes();
    let mut chars = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (c, used) = if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'n' => (b'\n', 2),
                b't' => (b'\t', 2),
                b'r' => (b'\r', 2),
                b'0'..=b'7' => {
                    let mut v: u32 = 0;
                    let mut j = i + 1;
                    while j < b.len() && j < i + 4 && (b'0'..=b'7').contains(&b[j]) {
                        v = v * 8 + u32::from(b[j] - b'0');
                        j += 1;
                    }
                    ((v & 0xff) as u8, j - i)
                }
                other => (other, 2),
            }
        } else {
            (b[i], 1)
        };
        chars.push(c);
        i += used;
    }
    // Ranges after escapes are resolved: `a-z` (a `-` first or last is itself).
    let mut out = Vec::new();
    let mut k = 0;
    while k < chars.len() {
        if k + 2 < chars.len() && chars[k + 1] == b'-' && chars[k] <= chars[k + 2] {
            out.extend(chars[k]..=chars[k + 2]);
            k += 3;
        } else {
            out.push(chars[k]);
            k += 1;
        }
    }
    out
}

/// One element of a basic regular expression.
#[derive(Debug)]
enum Re {
    Byte(u8),
    Any,
    Class { negate: bool, set: Vec<(u8, u8)> },
}

/// A compiled basic regular expression: anchors and elements, each maybe starred.
#[derive(Debug)]
struct Bre {
    start: bool,
    end: bool,
    items: Vec<(Re, bool)>,
}

fn compile(pattern: &str, fixed: bool, fold: bool) -> Result<Bre, String> {
    let b: Vec<u8> = if fold {
        pattern.to_ascii_lowercase().into_bytes()
    } else {
        pattern.as_bytes().to_vec()
    };
    if fixed {
        return Ok(Bre {
            start: false,
            end: false,
            items: b.into_iter().map(|c| (Re::Byte(c), false)).collect(),
        });
    }
    let mut i = 0;
    let start = b.first() == Some(&b'^');
    if start {
        i = 1;
    }
    let mut end = false;
    let mut items: Vec<(Re, bool)> = Vec::new();
    while i < b.len() {
        let c = b[i];
        let re = match c {
            b'$' if i + 1 == b.len() => {
                end = true;
                i += 1;
                continue;
            }
            b'*' if !items.is_empty() && !items.last().is_some_and(|l| l.1) => {
                items.last_mut().expect("checked").1 = true;
                i += 1;
                continue;
            }
            b'.' => Re::Any,
            b'\\' => {
                i += 1;
                match b.get(i) {
                    Some(b'(' | b')' | b'{' | b'}' | b'1'..=b'9') => {
                        return Err(format!(
                            "grep: groups, intervals and back-references are not supported by this shell: {pattern}"
                        ));
                    }
                    Some(&e) => Re::Byte(e),
                    None => return Err("grep: trailing backslash (\\)".into()),
                }
            }
            b'[' => {
                let mut j = i + 1;
                let negate = b.get(j) == Some(&b'^');
                if negate {
                    j += 1;
                }
                let mut set = Vec::new();
                let mut first = true;
                loop {
                    let Some(&c) = b.get(j) else {
                        return Err("grep: Unmatched [, [^, [:, [., or [=".into());
                    };
                    if c == b']' && !first {
                        break;
                    }
                    first = false;
                    if b.get(j + 1) == Some(&b'-') && b.get(j + 2).is_some_and(|c| *c != b']') {
                        set.push((c, b[j + 2]));
                        j += 3;
                    } else {
                        set.push((c, c));
                        j += 1;
                    }
                }
                i = j;
                Re::Class { negate, set }
            }
            c => Re::Byte(c),
        };
        items.push((re, false));
        i += 1;
    }
    Ok(Bre { start, end, items })
}

fn one(re: &Re, c: u8) -> bool {
    match re {
        Re::Byte(b) => *b == c,
        Re::Any => c != b'\n',
        Re::Class { negate, set } => set.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negate,
    }
}

/// Whether `items` match at the start of `t` (to its end when `end`).
fn match_here(items: &[(Re, bool)], t: &[u8], end: bool) -> bool {
    let Some(((re, star), rest)) = items.split_first() else {
        return !end || t.is_empty();
    };
    if *star {
        let mut n = 0;
        while n < t.len() && one(re, t[n]) {
            n += 1;
        }
        // Longest first, as a backtracking matcher would.
        return (0..=n).rev().any(|k| match_here(rest, &t[k..], end));
    }
    !t.is_empty() && one(re, t[0]) && match_here(rest, &t[1..], end)
}

impl Bre {
    fn is_match(&self, line: &[u8], whole: bool) -> bool {
        let (start, end) = (self.start || whole, self.end || whole);
        if start {
            return match_here(&self.items, line, end);
        }
        (0..=line.len()).any(|i| match_here(&self.items, &line[i..], end))
    }
}

impl Shell<'_> {
    pub(super) fn tr(&mut self, args: &[String]) -> i32 {
        let (delete, sets) = match args.split_first() {
            Some((o, rest)) if o == "-d" => (true, rest),
            Some((o, _)) if o.starts_with('-') && o.len() > 1 && o != "--" => {
                self.err_line(format!("tr: unsupported option -- '{}'", &o[1..]));
                return 1;
            }
            _ => (false, args),
        };
        let sets = match sets.first() {
            Some(o) if o == "--" => &sets[1..],
            _ => sets,
        };
        let input = self.stdin.read_all();
        let out: Vec<u8> = match (delete, sets) {
            (true, [set]) => {
                let set = tr_set(set);
                input.into_iter().filter(|c| !set.contains(c)).collect()
            }
            (false, [from, to]) => {
                let (from, to) = (tr_set(from), tr_set(to));
                let Some(&last) = to.last() else {
                    self.err_line("tr: when not truncating set1, string2 must be non-empty");
                    return 1;
                };
                let mut map: [u8; 256] = std::array::from_fn(|i| i as u8);
                for (i, c) in from.iter().enumerate() {
                    map[usize::from(*c)] = *to.get(i).unwrap_or(&last);
                }
                input.into_iter().map(|c| map[usize::from(c)]).collect()
            }
            _ => {
                self.err_line("tr: missing operand");
                return 1;
            }
        };
        self.out(out);
        0
    }

    pub(super) fn grep(&mut self, args: &[String]) -> i32 {
        let (mut quiet, mut invert, mut fixed, mut whole, mut fold, mut silent) =
            (false, false, false, false, false, false);
        let mut pattern: Option<String> = None;
        let mut rest = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--" {
                rest.extend(it.by_ref().cloned());
                break;
            }
            if a == "-e" {
                match it.next() {
                    Some(p) => pattern = Some(p.clone()),
                    None => {
                        self.err_line("grep: option requires an argument -- 'e'");
                        return 2;
                    }
                }
                continue;
            }
            if a.len() > 1 && a.starts_with('-') {
                for f in a[1..].chars() {
                    match f {
                        'q' => quiet = true,
                        'v' => invert = true,
                        'F' => fixed = true,
                        'x' => whole = true,
                        'i' => fold = true,
                        's' => silent = true,
                        'G' => {}
                        other => {
                            self.err_line(format!("grep: unsupported option -- '{other}'"));
                            return 2;
                        }
                    }
                }
                continue;
            }
            rest.push(a.clone());
        }
        let pattern = match pattern {
            Some(p) => p,
            None if !rest.is_empty() => rest.remove(0),
            None => {
                self.err_line("Usage: grep [OPTION]... PATTERNS [FILE]...");
                return 2;
            }
        };
        let re = match compile(&pattern, fixed, fold) {
            Ok(re) => re,
            Err(msg) => {
                self.err_line(msg);
                return 2;
            }
        };
        let files = if rest.is_empty() {
            vec!["-".to_string()]
        } else {
            rest
        };
        let many = files.len() > 1;
        let (mut matched, mut failed) = (false, false);
        for file in &files {
            let data = match self.read_path(file) {
                Ok(d) => d,
                Err(e) => {
                    if !silent {
                        self.err_line(format!("grep: {file}: {}", e.message()));
                    }
                    failed = true;
                    continue;
                }
            };
            let body = data.strip_suffix(b"\n").unwrap_or(&data);
            let lines: Vec<&[u8]> = if data.is_empty() {
                Vec::new()
            } else {
                body.split(|b| *b == b'\n').collect()
            };
            for line in lines {
                let text = if fold {
                    line.to_ascii_lowercase()
                } else {
                    line.to_vec()
                };
                if re.is_match(&text, whole) == invert {
                    continue;
                }
                matched = true;
                if quiet {
                    return 0;
                }
                let mut out = if many {
                    format!("{file}:").into_bytes()
                } else {
                    Vec::new()
                };
                out.extend_from_slice(line);
                out.push(b'\n');
                self.out(out);
            }
        }
        match (matched, failed) {
            (true, _) => 0,
            (false, true) => 2,
            (false, false) => 1,
        }
    }
}
