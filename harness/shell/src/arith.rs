//! `$((...))` arithmetic: signed 64-bit integers with the C operators POSIX requires, except
//! assignments and `?:`. Arithmetic wraps on overflow as dash's does.

/// Evaluates `expr` (already parameter-expanded); bare names are read through `var`.
pub(crate) fn eval(expr: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<i64, String> {
    let tokens = tokenize(expr)?;
    let mut p = Eval {
        tokens,
        pos: 0,
        var,
    };
    let v = p.binary(0, 0)?;
    match p.tokens.get(p.pos) {
        None => Ok(v),
        Some(_) => Err("expecting EOF".into()),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(i64),
    Name(String),
    Op(&'static str),
}

const OPS: [&str; 21] = [
    "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "&", "|",
    "^", "!", "~", "(",
];

fn tokenize(s: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Tok::Num(parse_number(&text)?));
        } else if c == '_' || c.is_ascii_alphabetic() {
            let start = i;
            while i < chars.len() && (chars[i] == '_' || chars[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            out.push(Tok::Name(chars[start..i].iter().collect()));
        } else if c == ')' {
            out.push(Tok::Op(")"));
            i += 1;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = OPS
                .iter()
                .find(|op| op.len() == 2 && two == **op)
                .or_else(|| OPS.iter().find(|op| op.len() == 1 && op.starts_with(c)))
                .ok_or_else(|| format!("expecting primary: \"{s}\""))?;
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// Decimal, `0x` hex or leading-zero octal, as in C.
fn parse_number(text: &str) -> Result<i64, String> {
    let (digits, radix) =
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (hex, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            (&text[1..], 8)
        } else {
            (text, 10)
        };
    u64::from_str_radix(digits, radix)
        .map(|v| v as i64)
        .map_err(|_| format!("Illegal number: {text}"))
}

struct Eval<'v> {
    tokens: Vec<Tok>,
    pos: usize,
    var: &'v dyn Fn(&str) -> Option<String>,
}

fn precedence(op: &str) -> Option<u8> {
    Some(match op {
        "||" => 1,
        "&&" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "==" | "!=" => 6,
        "<" | ">" | "<=" | ">=" => 7,
        "<<" | ">>" => 8,
        "+" | "-" => 9,
        "*" | "/" | "%" => 10,
        _ => return None,
    })
}

impl Eval<'_> {
    /// Precedence climbing over binary operators of at least `min` precedence.
    fn binary(&mut self, min: u8, depth: usize) -> Result<i64, String> {
        let mut left = self.unary(depth)?;
        while let Some(Tok::Op(op)) = self.tokens.get(self.pos).cloned() {
            let Some(prec) = precedence(op).filter(|p| *p > min) else {
                break;
            };
            self.pos += 1;
            let right = self.binary(prec, depth + 1)?;
            let b = |v: bool| i64::from(v);
            left = match op {
                "||" => b(left != 0 || right != 0),
                "&&" => b(left != 0 && right != 0),
                "|" => left | right,
                "^" => left ^ right,
                "&" => left & right,
                "==" => b(left == right),
                "!=" => b(left != right),
                "<" => b(left < right),
                ">" => b(left > right),
                "<=" => b(left <= right),
                ">=" => b(left >= right),
                "<<" => left.wrapping_shl(right as u32),
                ">>" => left.wrapping_shr(right as u32),
                "+" => left.wrapping_add(right),
                "-" => left.wrapping_sub(right),
                "*" => left.wrapping_mul(right),
                "/" | "%" if right == 0 => return Err("division by zero".into()),
                "/" => left.wrapping_div(right),
                _ => left.wrapping_rem(right),
            };
        }
        Ok(left)
    }

    fn unary(&mut self, depth: usize) -> Result<i64, String> {
        if depth > 64 {
            return Err("expression too deeply nested".into());
        }
        let tok = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        match tok {
            Some(Tok::Num(n)) => Ok(n),
            Some(Tok::Name(name)) => {
                let value = (self.var)(&name).unwrap_or_default();
                let value = value.trim();
                if value.is_empty() {
                    return Ok(0);
                }
                let (neg, digits) = match value.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, value),
                };
                let n = parse_number(digits).map_err(|_| format!("Illegal number: {value}"))?;
                Ok(if neg { n.wrapping_neg() } else { n })
            }
            Some(Tok::Op("(")) => {
                let v = self.binary(0, depth + 1)?;
                match self.tokens.get(self.pos) {
                    Some(Tok::Op(")")) => {
                        self.pos += 1;
                        Ok(v)
                    }
                    _ => Err("expecting ')'".into()),
                }
            }
            Some(Tok::Op("-")) => Ok(self.unary(depth + 1)?.wrapping_neg()),
            Some(Tok::Op("+")) => self.unary(depth + 1),
            Some(Tok::Op("!")) => Ok(i64::from(self.unary(depth + 1)? == 0)),
            Some(Tok::Op("~")) => Ok(!self.unary(depth + 1)?),
            _ => Err("expecting primary".into()),
        }
    }
}
