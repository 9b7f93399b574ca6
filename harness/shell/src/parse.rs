//! Lexer and recursive-descent parser for the shell subset.
//!
//! The lexer is driven by the parser one token at a time, so a command substitution `$(...)`
//! met inside a word is parsed by recursing into the parser on the same input. Like dash,
//! the top level is parsed one complete command (line) at a time so that earlier lines run
//! before a syntax error further down is reported.

/// Deepest nesting of compound commands and substitutions accepted; keeps both the parser and
/// the (recursive) executor far from the end of a 2 MiB thread stack.
const MAX_DEPTH: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub line: usize,
    pub message: String,
}

type PResult<T> = Result<T, SyntaxError>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Word {
    pub parts: Vec<Part>,
    /// The source text, for error messages and reserved-word checks.
    pub raw: String,
}

impl Word {
    /// The text if the word is a single unquoted literal (reserved words, names, fd numbers).
    pub(super) fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Lit(s)] => Some(s),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Unquoted literal text.
    Lit(String),
    /// Quoted literal text: never split, and present as a field even when empty.
    Quoted(String),
    Param {
        name: String,
        op: ParamOp,
        quoted: bool,
    },
    Subst {
        body: List,
        quoted: bool,
    },
    /// `$((...))`: the expression's parts, expanded and then evaluated.
    Arith {
        parts: Vec<Part>,
        quoted: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ParamOp {
    Plain,
    Length,
    /// `${X-w}`/`${X:-w}` and friends; `colon` also treats an empty value as unset.
    Default {
        colon: bool,
        word: Vec<Part>,
    },
    Assign {
        colon: bool,
        word: Vec<Part>,
    },
    Alt {
        colon: bool,
        word: Vec<Part>,
    },
    Error {
        colon: bool,
        word: Vec<Part>,
    },
    /// `${X%p}` (suffix) / `${X#p}` (prefix), `longest` for `%%` / `##`.
    Trim {
        suffix: bool,
        longest: bool,
        pattern: Vec<Part>,
    },
}

pub(crate) type List = Vec<AndOr>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AndOr {
    pub first: Pipeline,
    /// `(true, p)` for `&& p`, `(false, p)` for `|| p`.
    pub rest: Vec<(bool, Pipeline)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pipeline {
    pub negate: bool,
    pub cmds: Vec<Command>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    pub kind: CmdKind,
    pub redirs: Vec<Redir>,
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CmdKind {
    Simple {
        assigns: Vec<(String, Word)>,
        words: Vec<Word>,
    },
    Group(List),
    Subshell(List),
    If {
        branches: Vec<(List, List)>,
        otherwise: Option<List>,
    },
    Loop {
        until: bool,
        cond: List,
        body: List,
    },
    For {
        var: String,
        items: Option<Vec<Word>>,
        body: List,
    },
    /// `case WORD in PATTERN|PATTERN) LIST ;; ... esac`.
    Case {
        word: Word,
        items: Vec<(Vec<Word>, List)>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Redir {
    pub fd: u32,
    pub op: RedirOp,
    pub target: Word,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RedirOp {
    In,
    Out,
    Append,
    DupIn,
    DupOut,
    ReadWrite,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Word(Word),
    Redir(Option<u32>, RedirOp),
    AndIf,
    OrIf,
    Semi,
    DSemi,
    Amp,
    Pipe,
    LParen,
    RParen,
    Newline,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Word(w) => w.raw.clone(),
            Tok::Redir(fd, op) => {
                let op = match op {
                    RedirOp::In => "<",
                    RedirOp::Out => ">",
                    RedirOp::Append => ">>",
                    RedirOp::DupIn => "<&",
                    RedirOp::DupOut => ">&",
                    RedirOp::ReadWrite => "<>",
                };
                fd.map_or(op.to_string(), |fd| format!("{fd}{op}"))
            }
            Tok::AndIf => "&&".into(),
            Tok::OrIf => "||".into(),
            Tok::Semi => ";".into(),
            Tok::DSemi => ";;".into(),
            Tok::Amp => "&".into(),
            Tok::Pipe => "|".into(),
            Tok::LParen => "(".into(),
            Tok::RParen => ")".into(),
            Tok::Newline => "newline".into(),
            Tok::Eof => "end of file".into(),
        }
    }

    fn is_word(&self, text: &str) -> bool {
        matches!(self, Tok::Word(w) if w.literal() == Some(text))
    }
}

const RESERVED: &[&str] = &[
    "then", "else", "elif", "fi", "do", "done", "}", "esac", "in",
];

pub(crate) fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// A word outside quotes: ends at a blank or an operator character.
    Unquoted,
    /// Inside "...": ends at the closing quote.
    DQuote,
    /// The word in `${X:-word}`: ends at `}`; `dq` if the expansion itself is in "...".
    Brace { dq: bool },
    /// An arithmetic expression: all of the input, only `$`, backquotes and `\` special.
    Arith,
}

pub(crate) struct Parser {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    peeked: Option<(Tok, usize)>,
    /// The line the most recently lexed token started on.
    token_start_line: usize,
    depth: usize,
}

impl Parser {
    pub(super) fn new(src: &str) -> Self {
        Self::with_line(src, 1)
    }

    fn with_line(src: &str, line: usize) -> Self {
        Parser {
            chars: src.chars().collect(),
            pos: 0,
            line,
            peeked: None,
            token_start_line: line,
            depth: 0,
        }
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(SyntaxError {
            line: self.line,
            message: message.into(),
        })
    }

    fn unexpected<T>(&self, tok: &Tok, expecting: Option<&str>) -> PResult<T> {
        let what = match tok {
            Tok::Eof => "end of file".to_string(),
            Tok::Newline => "newline".to_string(),
            other => format!("\"{}\"", other.describe()),
        };
        match expecting {
            Some(e) => self.err(format!("{what} unexpected (expecting \"{e}\")")),
            None => self.err(format!("{what} unexpected")),
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ---- characters ----

    fn peek_char(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_char_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    // ---- tokens ----

    fn peek(&mut self) -> PResult<&Tok> {
        if self.peeked.is_none() {
            let tok = self.lex()?;
            self.peeked = Some((tok, self.token_start_line));
        }
        match &self.peeked {
            Some((tok, _)) => Ok(tok),
            None => self.err("internal lexer state"),
        }
    }

    fn peek_line(&mut self) -> PResult<usize> {
        self.peek()?;
        Ok(self.peeked.as_ref().map_or(self.line, |(_, l)| *l))
    }

    fn next(&mut self) -> PResult<Tok> {
        self.peek()?;
        match self.peeked.take() {
            Some((tok, _)) => Ok(tok),
            None => self.err("internal lexer state"),
        }
    }

    fn skip_newlines(&mut self) -> PResult<()> {
        while matches!(self.peek()?, Tok::Newline) {
            self.next()?;
        }
        Ok(())
    }

    fn lex(&mut self) -> PResult<Tok> {
        loop {
            match self.peek_char() {
                Some(' ' | '\t' | '\r') => {
                    self.bump();
                }
                Some('\\') if self.peek_char_at(1) == Some('\n') => {
                    self.bump();
                    self.bump();
                }
                Some('#') => {
                    while !matches!(self.peek_char(), None | Some('\n')) {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
        self.token_start_line = self.line;
        let Some(c) = self.peek_char() else {
            return Ok(Tok::Eof);
        };
        let two = |p: &mut Self, tok2: Tok, second: char, tok1: Tok| {
            p.bump();
            if p.peek_char() == Some(second) {
                p.bump();
                tok2
            } else {
                tok1
            }
        };
        Ok(match c {
            '\n' => {
                self.bump();
                Tok::Newline
            }
            '&' => two(self, Tok::AndIf, '&', Tok::Amp),
            '|' => two(self, Tok::OrIf, '|', Tok::Pipe),
            ';' => two(self, Tok::DSemi, ';', Tok::Semi),
            '(' => {
                self.bump();
                Tok::LParen
            }
            ')' => {
                self.bump();
                Tok::RParen
            }
            '<' | '>' => self.lex_redir(None)?,
            d if d.is_ascii_digit() => {
                let mut n = 0;
                while self.peek_char_at(n).is_some_and(|c| c.is_ascii_digit()) {
                    n += 1;
                }
                if matches!(self.peek_char_at(n), Some('<' | '>')) {
                    let digits: String = self.chars[self.pos..self.pos + n].iter().collect();
                    self.pos += n;
                    match digits.parse::<u32>() {
                        Ok(fd) if fd <= 9 => self.lex_redir(Some(fd))?,
                        _ => return self.err("Bad fd number"),
                    }
                } else {
                    Tok::Word(self.lex_word()?)
                }
            }
            _ => Tok::Word(self.lex_word()?),
        })
    }

    fn lex_redir(&mut self, fd: Option<u32>) -> PResult<Tok> {
        let op = match self.bump() {
            Some('<') => match self.peek_char() {
                Some('<') => return self.err("here-documents (<<) are not supported"),
                Some('&') => {
                    self.bump();
                    RedirOp::DupIn
                }
                Some('>') => {
                    self.bump();
                    RedirOp::ReadWrite
                }
                _ => RedirOp::In,
            },
            _ => match self.peek_char() {
                Some('>') => {
                    self.bump();
                    RedirOp::Append
                }
                Some('&') => {
                    self.bump();
                    RedirOp::DupOut
                }
                Some('|') => {
                    // `>|` (clobber) is `>` since there is no noclobber option.
                    self.bump();
                    RedirOp::Out
                }
                _ => RedirOp::Out,
            },
        };
        Ok(Tok::Redir(fd, op))
    }

    fn lex_word(&mut self) -> PResult<Word> {
        let start = self.pos;
        let parts = self.lex_parts(Ctx::Unquoted)?;
        let raw = self.chars[start..self.pos].iter().collect();
        Ok(Word { parts, raw })
    }

    /// Reads word parts until the end given by `ctx` (the closing `"` is consumed, a closing
    /// `}` is not).
    fn lex_parts(&mut self, ctx: Ctx) -> PResult<Vec<Part>> {
        let mut parts: Vec<Part> = Vec::new();
        let quoted = matches!(ctx, Ctx::DQuote | Ctx::Brace { dq: true } | Ctx::Arith);
        let push_char = |parts: &mut Vec<Part>, c: char, q: bool| match (parts.last_mut(), q) {
            (Some(Part::Lit(s)), false) | (Some(Part::Quoted(s)), true) => s.push(c),
            (_, false) => parts.push(Part::Lit(c.to_string())),
            (_, true) => parts.push(Part::Quoted(c.to_string())),
        };
        loop {
            let Some(c) = self.peek_char() else {
                return match ctx {
                    Ctx::Unquoted | Ctx::Arith => Ok(parts),
                    Ctx::DQuote => self.err("Unterminated quoted string"),
                    Ctx::Brace { .. } => self.err("Missing '}'"),
                };
            };
            match (ctx, c) {
                (Ctx::Unquoted, ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '<' | '>')
                | (Ctx::Unquoted, '(' | ')') => return Ok(parts),
                (Ctx::Brace { .. }, '}') => return Ok(parts),
                (Ctx::DQuote, '"') => {
                    self.bump();
                    if parts.is_empty() {
                        parts.push(Part::Quoted(String::new()));
                    }
                    return Ok(parts);
                }
                (_, '\\') => {
                    self.bump();
                    match self.bump() {
                        Some('\n') => {}
                        Some(e) if !quoted || matches!(e, '$' | '`' | '"' | '\\') => {
                            push_char(&mut parts, e, true)
                        }
                        Some(e) => {
                            push_char(&mut parts, '\\', true);
                            push_char(&mut parts, e, true);
                        }
                        None => push_char(&mut parts, '\\', quoted),
                    }
                }
                (Ctx::Unquoted | Ctx::Brace { dq: false }, '\'') => {
                    self.bump();
                    let mut s = String::new();
                    loop {
                        match self.bump() {
                            Some('\'') => break,
                            Some(ch) => s.push(ch),
                            None => return self.err("Unterminated quoted string"),
                        }
                    }
                    parts.push(Part::Quoted(s));
                }
                (Ctx::Unquoted | Ctx::Brace { dq: false }, '"') => {
                    self.bump();
                    parts.extend(self.lex_parts(Ctx::DQuote)?);
                }
                (_, '$') => {
                    self.bump();
                    match self.lex_dollar(quoted)? {
                        Some(part) => parts.push(part),
                        None => push_char(&mut parts, '$', quoted),
                    }
                }
                (_, '`') => {
                    self.bump();
                    parts.push(self.lex_backtick(quoted)?);
                }
                (_, other) => {
                    self.bump();
                    push_char(&mut parts, other, quoted);
                }
            }
        }
    }

    /// After a `$`: a parameter or command substitution, or None for a literal `$`.
    fn lex_dollar(&mut self, quoted: bool) -> PResult<Option<Part>> {
        let plain = |name: String| Part::Param {
            name,
            op: ParamOp::Plain,
            quoted,
        };
        match self.peek_char() {
            Some('(') if self.peek_char_at(1) == Some('(') => {
                self.bump();
                self.bump();
                let line = self.line;
                let mut src = String::new();
                let mut depth = 0usize;
                loop {
                    match self.bump() {
                        Some(')') if depth == 0 && self.peek_char() == Some(')') => {
                            self.bump();
                            break;
                        }
                        Some(')') if depth == 0 => return self.err("Missing '))'"),
                        Some(c) => {
                            match c {
                                '(' => depth += 1,
                                ')' => depth -= 1,
                                _ => {}
                            }
                            src.push(c);
                        }
                        None => return self.err("Missing '))'"),
                    }
                }
                let mut inner = Parser::with_line(&src, line);
                inner.depth = self.depth;
                inner.enter()?;
                let parts = inner.lex_parts(Ctx::Arith)?;
                Ok(Some(Part::Arith { parts, quoted }))
            }
            Some('(') => {
                self.bump();
                self.enter()?;
                let body = self.compound_list(&[])?;
                let close = self.next()?;
                if close != Tok::RParen {
                    return self.unexpected(&close, Some(")"));
                }
                self.leave();
                Ok(Some(Part::Subst { body, quoted }))
            }
            Some('{') => {
                self.bump();
                self.lex_brace_param(quoted).map(Some)
            }
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                let mut name = String::new();
                while let Some(c) = self
                    .peek_char()
                    .filter(|c| *c == '_' || c.is_ascii_alphanumeric())
                {
                    self.bump();
                    name.push(c);
                }
                Ok(Some(plain(name)))
            }
            Some(c) if c.is_ascii_digit() || "?#@*$!-".contains(c) => {
                self.bump();
                Ok(Some(plain(c.to_string())))
            }
            _ => Ok(None),
        }
    }

    fn lex_brace_param(&mut self, quoted: bool) -> PResult<Part> {
        let length =
            self.peek_char() == Some('#') && self.peek_char_at(1).is_some_and(|c| c != '}');
        if length {
            self.bump();
        }
        let mut name = String::new();
        match self.peek_char() {
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                while let Some(c) = self
                    .peek_char()
                    .filter(|c| *c == '_' || c.is_ascii_alphanumeric())
                {
                    self.bump();
                    name.push(c);
                }
            }
            Some(c) if c.is_ascii_digit() => {
                while let Some(c) = self.peek_char().filter(|c| c.is_ascii_digit()) {
                    self.bump();
                    name.push(c);
                }
            }
            Some(c) if "?#@*$!-".contains(c) => {
                self.bump();
                name.push(c);
            }
            _ => return self.err("Bad substitution"),
        }
        if length {
            return match self.bump() {
                Some('}') => Ok(Part::Param {
                    name,
                    op: ParamOp::Length,
                    quoted,
                }),
                _ => self.err("Bad substitution"),
            };
        }
        let colon = self.peek_char() == Some(':');
        if colon {
            self.bump();
        }
        let op_char = self.bump();
        if op_char == Some('}') && !colon {
            return Ok(Part::Param {
                name,
                op: ParamOp::Plain,
                quoted,
            });
        }
        if let (false, Some(c @ ('%' | '#'))) = (colon, op_char) {
            let longest = self.peek_char() == Some(c);
            if longest {
                self.bump();
            }
            self.enter()?;
            let pattern = self.lex_parts(Ctx::Brace { dq: false })?;
            self.leave();
            self.bump();
            return Ok(Part::Param {
                name,
                op: ParamOp::Trim {
                    suffix: c == '%',
                    longest,
                    pattern,
                },
                quoted,
            });
        }
        let make: fn(bool, Vec<Part>) -> ParamOp = match op_char {
            Some('-') => |colon, word| ParamOp::Default { colon, word },
            Some('=') => |colon, word| ParamOp::Assign { colon, word },
            Some('+') => |colon, word| ParamOp::Alt { colon, word },
            Some('?') => |colon, word| ParamOp::Error { colon, word },
            _ => return self.err("Bad substitution"),
        };
        self.enter()?;
        let word = self.lex_parts(Ctx::Brace { dq: quoted })?;
        self.leave();
        self.bump(); // the closing '}' (lex_parts only returns Ok at one)
        Ok(Part::Param {
            name,
            op: make(colon, word),
            quoted,
        })
    }

    /// After an opening backquote: the old-style command substitution up to the closing one.
    fn lex_backtick(&mut self, quoted: bool) -> PResult<Part> {
        let line = self.line;
        let mut src = String::new();
        loop {
            match self.bump() {
                Some('`') => break,
                Some('\\') => match self.bump() {
                    Some(c @ ('`' | '\\' | '$')) => src.push(c),
                    Some(c) => {
                        src.push('\\');
                        src.push(c);
                    }
                    None => return self.err("EOF in backquote substitution"),
                },
                Some(c) => src.push(c),
                None => return self.err("EOF in backquote substitution"),
            }
        }
        let mut inner = Parser::with_line(&src, line);
        inner.depth = self.depth;
        inner.enter()?;
        let body = inner.compound_list(&[])?;
        match inner.next()? {
            Tok::Eof => Ok(Part::Subst { body, quoted }),
            other => inner.unexpected(&other, None),
        }
    }

    // ---- grammar ----

    /// The next complete command (one line of and-or lists), or None at the end of input.
    pub(super) fn next_command(&mut self) -> PResult<Option<List>> {
        self.skip_newlines()?;
        if matches!(self.peek()?, Tok::Eof) {
            return Ok(None);
        }
        let mut list = Vec::new();
        loop {
            list.push(self.and_or()?);
            match self.next()? {
                Tok::Semi => {
                    if matches!(self.peek()?, Tok::Newline | Tok::Eof) {
                        self.next()?;
                        break;
                    }
                }
                Tok::Newline | Tok::Eof => break,
                Tok::Amp => return self.err("background jobs (&) are not supported"),
                other => return self.unexpected(&other, None),
            }
        }
        Ok(Some(list))
    }

    /// A list inside a compound command, ending before one of `ends`, `)` or end of input.
    fn compound_list(&mut self, ends: &[&str]) -> PResult<List> {
        let mut list = Vec::new();
        self.skip_newlines()?;
        loop {
            let tok = self.peek()?;
            if matches!(tok, Tok::RParen | Tok::DSemi | Tok::Eof)
                || ends.iter().any(|e| tok.is_word(e))
            {
                break;
            }
            list.push(self.and_or()?);
            match self.peek()? {
                Tok::Semi | Tok::Newline => {
                    self.next()?;
                    self.skip_newlines()?;
                }
                Tok::Amp => return self.err("background jobs (&) are not supported"),
                _ => break,
            }
        }
        if list.is_empty() {
            let tok = self.peek()?.clone();
            let expecting = (tok == Tok::Eof).then(|| ends.last().copied().unwrap_or(")"));
            return self.unexpected(&tok, expecting);
        }
        Ok(list)
    }

    fn expect_word(&mut self, word: &str) -> PResult<()> {
        let tok = self.next()?;
        if tok.is_word(word) {
            Ok(())
        } else {
            self.unexpected(&tok, Some(word))
        }
    }

    fn and_or(&mut self) -> PResult<AndOr> {
        let first = self.pipeline()?;
        let mut rest = Vec::new();
        loop {
            let and = match self.peek()? {
                Tok::AndIf => true,
                Tok::OrIf => false,
                _ => break,
            };
            self.next()?;
            self.skip_newlines()?;
            rest.push((and, self.pipeline()?));
        }
        Ok(AndOr { first, rest })
    }

    fn pipeline(&mut self) -> PResult<Pipeline> {
        let negate = self.peek()?.is_word("!");
        if negate {
            self.next()?;
        }
        let mut cmds = vec![self.command()?];
        while matches!(self.peek()?, Tok::Pipe) {
            self.next()?;
            self.skip_newlines()?;
            cmds.push(self.command()?);
        }
        Ok(Pipeline { negate, cmds })
    }

    fn command(&mut self) -> PResult<Command> {
        let line = self.peek_line()?;
        let tok = self.peek()?.clone();
        let keyword = match &tok {
            Tok::Word(w) => w.literal().map(str::to_string),
            _ => None,
        };
        let kind = match (&tok, keyword.as_deref()) {
            (Tok::LParen, _) => {
                self.next()?;
                self.enter()?;
                let body = self.compound_list(&[])?;
                let close = self.next()?;
                if close != Tok::RParen {
                    return self.unexpected(&close, Some(")"));
                }
                self.leave();
                CmdKind::Subshell(body)
            }
            (_, Some("{")) => {
                self.next()?;
                self.enter()?;
                let body = self.compound_list(&["}"])?;
                self.expect_word("}")?;
                self.leave();
                CmdKind::Group(body)
            }
            (_, Some("if")) => {
                self.next()?;
                self.enter()?;
                let mut branches = Vec::new();
                let mut otherwise = None;
                loop {
                    let cond = self.compound_list(&["then"])?;
                    self.expect_word("then")?;
                    let body = self.compound_list(&["elif", "else", "fi"])?;
                    branches.push((cond, body));
                    match self.next()? {
                        t if t.is_word("elif") => continue,
                        t if t.is_word("else") => {
                            otherwise = Some(self.compound_list(&["fi"])?);
                            self.expect_word("fi")?;
                            break;
                        }
                        t if t.is_word("fi") => break,
                        t => return self.unexpected(&t, Some("fi")),
                    }
                }
                self.leave();
                CmdKind::If {
                    branches,
                    otherwise,
                }
            }
            (_, Some(kw @ ("while" | "until"))) => {
                let until = kw == "until";
                self.next()?;
                self.enter()?;
                let cond = self.compound_list(&["do"])?;
                self.expect_word("do")?;
                let body = self.compound_list(&["done"])?;
                self.expect_word("done")?;
                self.leave();
                CmdKind::Loop { until, cond, body }
            }
            (_, Some("for")) => {
                self.next()?;
                self.enter()?;
                let var = match self.next()? {
                    Tok::Word(w) if w.literal().is_some_and(is_name) => w.raw,
                    other => return self.unexpected(&other, None),
                };
                // Optional `in WORDS` terminated by `;` or a newline, then `do`.
                let mut items = None;
                self.skip_newlines()?;
                if self.peek()?.is_word("in") {
                    self.next()?;
                    let mut words = Vec::new();
                    while let Tok::Word(_) = self.peek()? {
                        if let Tok::Word(w) = self.next()? {
                            words.push(w);
                        }
                    }
                    match self.next()? {
                        Tok::Semi | Tok::Newline => {}
                        other => return self.unexpected(&other, Some("do")),
                    }
                    items = Some(words);
                } else if matches!(self.peek()?, Tok::Semi) {
                    self.next()?;
                }
                self.skip_newlines()?;
                self.expect_word("do")?;
                let body = self.compound_list(&["done"])?;
                self.expect_word("done")?;
                self.leave();
                CmdKind::For { var, items, body }
            }
            (_, Some("case")) => {
                self.next()?;
                self.enter()?;
                let word = match self.next()? {
                    Tok::Word(w) => w,
                    other => return self.unexpected(&other, None),
                };
                self.skip_newlines()?;
                self.expect_word("in")?;
                self.skip_newlines()?;
                let mut items = Vec::new();
                while !self.peek()?.is_word("esac") {
                    if matches!(self.peek()?, Tok::LParen) {
                        self.next()?;
                    }
                    let mut patterns = Vec::new();
                    loop {
                        match self.next()? {
                            Tok::Word(w) => patterns.push(w),
                            other => return self.unexpected(&other, None),
                        }
                        match self.next()? {
                            Tok::Pipe => continue,
                            Tok::RParen => break,
                            other => return self.unexpected(&other, Some(")")),
                        }
                    }
                    self.skip_newlines()?;
                    let body = if matches!(self.peek()?, Tok::DSemi) || self.peek()?.is_word("esac")
                    {
                        Vec::new()
                    } else {
                        self.compound_list(&["esac"])?
                    };
                    items.push((patterns, body));
                    if matches!(self.peek()?, Tok::DSemi) {
                        self.next()?;
                        self.skip_newlines()?;
                    } else if !self.peek()?.is_word("esac") {
                        let tok = self.next()?;
                        return self.unexpected(&tok, Some("esac"));
                    }
                }
                self.next()?;
                self.leave();
                CmdKind::Case { word, items }
            }
            (_, Some(r)) if RESERVED.contains(&r) => return self.unexpected(&tok, None),
            (Tok::Word(_) | Tok::Redir(..), _) => return self.simple(line),
            (other, _) => return self.unexpected(other, None),
        };
        let mut redirs = Vec::new();
        while let Tok::Redir(..) = self.peek()? {
            redirs.push(self.redir()?);
        }
        Ok(Command { kind, redirs, line })
    }

    fn redir(&mut self) -> PResult<Redir> {
        let Tok::Redir(fd, op) = self.next()? else {
            return self.err("internal parser state");
        };
        let fd = fd.unwrap_or(match op {
            RedirOp::In | RedirOp::DupIn | RedirOp::ReadWrite => 0,
            _ => 1,
        });
        match self.next()? {
            Tok::Word(target) => Ok(Redir { fd, op, target }),
            other => self.unexpected(&other, None),
        }
    }

    fn simple(&mut self, line: usize) -> PResult<Command> {
        let mut assigns = Vec::new();
        let mut words: Vec<Word> = Vec::new();
        let mut redirs = Vec::new();
        loop {
            match self.peek()? {
                Tok::Redir(..) => redirs.push(self.redir()?),
                Tok::Word(_) => {
                    let Tok::Word(w) = self.next()? else {
                        return self.err("internal parser state");
                    };
                    match (words.is_empty(), split_assignment(&w)) {
                        (true, Some(assign)) => assigns.push(assign),
                        _ => words.push(w),
                    }
                }
                Tok::LParen if words.len() == 1 && assigns.is_empty() => {
                    return self.err("function definitions are not supported");
                }
                _ => break,
            }
        }
        Ok(Command {
            kind: CmdKind::Simple { assigns, words },
            redirs,
            line,
        })
    }
}

/// `NAME=value` at the start of a simple command: the name and the value as a word.
fn split_assignment(w: &Word) -> Option<(String, Word)> {
    let Some(Part::Lit(first)) = w.parts.first() else {
        return None;
    };
    let (name, rest) = first.split_once('=')?;
    if !is_name(name) {
        return None;
    }
    let mut parts = Vec::with_capacity(w.parts.len());
    if !rest.is_empty() {
        parts.push(Part::Lit(rest.to_string()));
    }
    parts.extend(w.parts[1..].iter().cloned());
    let raw = w
        .raw
        .split_once('=')
        .map_or(String::new(), |(_, r)| r.to_string());
    Some((name.to_string(), Word { parts, raw }))
}
