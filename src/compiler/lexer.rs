//! Tokens of the schema (`.pg`) and query (`.gq`) languages, with the line and
//! column of each so that every parse error can point at the offending text.

use crate::error::{OmniError, Result};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    /// `$name`
    Var(String),
    Str(String),
    Int(i128),
    Float(f64),
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Colon,
    Comma,
    Question,
    At,
    Arrow,
    DotDot,
    Dot,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Minus,
    Star,
    Eof,
}

impl Tok {
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Var(s) => format!("'${s}'"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Int(i) => format!("number {i}"),
            Tok::Float(f) => format!("number {f}"),
            Tok::Eof => "end of input".to_string(),
            other => format!("'{}'", punct_text(other)),
        }
    }
}

fn punct_text(t: &Tok) -> &'static str {
    match t {
        Tok::LBrace => "{",
        Tok::RBrace => "}",
        Tok::LParen => "(",
        Tok::RParen => ")",
        Tok::LBracket => "[",
        Tok::RBracket => "]",
        Tok::Colon => ":",
        Tok::Comma => ",",
        Tok::Question => "?",
        Tok::At => "@",
        Tok::Arrow => "->",
        Tok::DotDot => "..",
        Tok::Dot => ".",
        Tok::Eq => "=",
        Tok::Ne => "!=",
        Tok::Lt => "<",
        Tok::Le => "<=",
        Tok::Gt => ">",
        Tok::Ge => ">=",
        Tok::Minus => "-",
        Tok::Star => "*",
        _ => "?",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub pos: Pos,
    /// Byte offset of the token's first character in the source.
    pub offset: usize,
}

/// The source line at `pos`, for error messages.
pub fn line_text(src: &str, pos: Pos) -> String {
    src.lines()
        .nth(pos.line.saturating_sub(1))
        .unwrap_or("")
        .to_string()
}

pub fn parse_error(src: &str, pos: Pos, message: impl Into<String>) -> OmniError {
    OmniError::Parse {
        line: pos.line,
        column: pos.col,
        message: message.into(),
        snippet: line_text(src, pos),
    }
}

// One match over the input, one arm per token: the token grammar reads
// top to bottom in one place.
pub fn tokenize(src: &str) -> Result<Vec<Token>> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut line_start = 0;
    let pos_at = |i: usize, line: usize, line_start: usize| Pos {
        line,
        col: src[line_start..i].chars().count() + 1,
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            i += 1;
            line += 1;
            line_start = i;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            let start = pos_at(i, line, line_start);
            i += 2;
            loop {
                if i + 1 >= bytes.len() {
                    return Err(parse_error(src, start, "unterminated block comment"));
                }
                if bytes[i] == b'*' && bytes[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if bytes[i] == b'\n' {
                    line += 1;
                    line_start = i + 1;
                }
                i += 1;
            }
            continue;
        }
        let pos = pos_at(i, line, line_start);
        let offset = i;
        let push = |out: &mut Vec<Token>, tok| out.push(Token { tok, pos, offset });
        match c {
            b'"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    let Some(&b) = bytes.get(i) else {
                        return Err(parse_error(src, pos, "unterminated string"));
                    };
                    match b {
                        b'"' => {
                            i += 1;
                            break;
                        }
                        b'\\' => {
                            let esc = bytes.get(i + 1).copied();
                            match esc {
                                Some(b'n') => s.push('\n'),
                                Some(b't') => s.push('\t'),
                                Some(b'\\') => s.push('\\'),
                                Some(b'"') => s.push('"'),
                                _ => {
                                    return Err(parse_error(
                                        src,
                                        pos_at(i, line, line_start),
                                        "unknown escape in string (use \\n, \\t, \\\\ or \\\")",
                                    ));
                                }
                            }
                            i += 2;
                        }
                        b'\n' => return Err(parse_error(src, pos, "unterminated string")),
                        _ => {
                            let ch = src[i..].chars().next().expect("char");
                            s.push(ch);
                            i += ch.len_utf8();
                        }
                    }
                }
                push(&mut out, Tok::Str(s));
            }
            b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
                    i += 1;
                }
                let mut is_float = false;
                // A '.' followed by a digit is a fraction; '..' is a range.
                if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                    is_float = true;
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                    let mut j = i + 1;
                    if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                        j += 1;
                    }
                    if j < bytes.len() && bytes[j].is_ascii_digit() {
                        is_float = true;
                        i = j;
                        while i < bytes.len() && bytes[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                }
                let text: String = src[start..i].chars().filter(|c| *c != '_').collect();
                if is_float {
                    let v: f64 = text
                        .parse()
                        .map_err(|_| parse_error(src, pos, format!("bad number '{text}'")))?;
                    push(&mut out, Tok::Float(v));
                } else {
                    let v: i128 = text.parse().map_err(|_| {
                        parse_error(src, pos, format!("number '{text}' is too large"))
                    })?;
                    push(&mut out, Tok::Int(v));
                }
            }
            b'$' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if start == i {
                    return Err(parse_error(src, pos, "expected a variable name after '$'"));
                }
                push(&mut out, Tok::Var(src[start..i].to_string()));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                push(&mut out, Tok::Ident(src[start..i].to_string()));
            }
            _ => {
                let two = bytes.get(i + 1).copied();
                let (tok, len) = match (c, two) {
                    (b'-', Some(b'>')) => (Tok::Arrow, 2),
                    (b'.', Some(b'.')) => (Tok::DotDot, 2),
                    (b'!', Some(b'=')) => (Tok::Ne, 2),
                    (b'<', Some(b'=')) => (Tok::Le, 2),
                    (b'>', Some(b'=')) => (Tok::Ge, 2),
                    (b'{', _) => (Tok::LBrace, 1),
                    (b'}', _) => (Tok::RBrace, 1),
                    (b'(', _) => (Tok::LParen, 1),
                    (b')', _) => (Tok::RParen, 1),
                    (b'[', _) => (Tok::LBracket, 1),
                    (b']', _) => (Tok::RBracket, 1),
                    (b':', _) => (Tok::Colon, 1),
                    (b',', _) => (Tok::Comma, 1),
                    (b'?', _) => (Tok::Question, 1),
                    (b'@', _) => (Tok::At, 1),
                    (b'.', _) => (Tok::Dot, 1),
                    (b'=', _) => (Tok::Eq, 1),
                    (b'<', _) => (Tok::Lt, 1),
                    (b'>', _) => (Tok::Gt, 1),
                    (b'-', _) => (Tok::Minus, 1),
                    (b'*', _) => (Tok::Star, 1),
                    _ => {
                        let ch = src[i..].chars().next().expect("char");
                        return Err(parse_error(
                            src,
                            pos,
                            format!("unexpected character '{ch}'"),
                        ));
                    }
                };
                i += len;
                push(&mut out, tok);
            }
        }
    }
    let pos = pos_at(i, line, line_start);
    out.push(Token {
        tok: Tok::Eof,
        pos,
        offset: i,
    });
    Ok(out)
}

/// A cursor over tokens with the helpers both parsers use.
pub struct Cursor<'a> {
    pub src: &'a str,
    toks: Vec<Token>,
    i: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Result<Self> {
        Ok(Self {
            src,
            toks: tokenize(src)?,
            i: 0,
        })
    }

    pub fn peek(&self) -> &Tok {
        &self.toks[self.i].tok
    }

    pub fn peek_at(&self, n: usize) -> &Tok {
        let j = (self.i + n).min(self.toks.len() - 1);
        &self.toks[j].tok
    }

    pub fn pos(&self) -> Pos {
        self.toks[self.i].pos
    }

    /// Byte offset of the current token in the source.
    pub fn offset(&self) -> usize {
        self.toks[self.i].offset
    }

    pub fn bump(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    pub fn at(&self, t: &Tok) -> bool {
        self.peek() == t
    }

    pub fn at_ident(&self, word: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == word)
    }

    pub fn eat(&mut self, t: &Tok) -> bool {
        if self.at(t) {
            self.bump();
            true
        } else {
            false
        }
    }

    pub fn error(&self, message: impl Into<String>) -> OmniError {
        parse_error(self.src, self.pos(), message)
    }

    pub fn error_at(&self, pos: Pos, message: impl Into<String>) -> OmniError {
        parse_error(self.src, pos, message)
    }

    pub fn expect(&mut self, t: &Tok, what: &str) -> Result<Token> {
        if self.at(t) {
            Ok(self.bump())
        } else {
            Err(self.error(format!("expected {what}, found {}", self.peek().describe())))
        }
    }

    pub fn expect_ident(&mut self, what: &str) -> Result<(String, Pos)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let pos = self.pos();
                self.bump();
                Ok((s, pos))
            }
            other => Err(self.error(format!("expected {what}, found {}", other.describe()))),
        }
    }

    pub fn expect_keyword(&mut self, word: &str) -> Result<Pos> {
        if self.at_ident(word) {
            let pos = self.pos();
            self.bump();
            Ok(pos)
        } else {
            Err(self.error(format!(
                "expected '{word}', found {}",
                self.peek().describe()
            )))
        }
    }

    pub fn expect_str(&mut self, what: &str) -> Result<String> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.bump();
                Ok(s)
            }
            other => Err(self.error(format!("expected {what}, found {}", other.describe()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_line_and_column() {
        let toks = tokenize("node A {\n  x: I32? // c\n  /* b\n */ y: [String]\n}").unwrap();
        let y = toks
            .iter()
            .find(|t| t.tok == Tok::Ident("y".into()))
            .unwrap();
        assert_eq!(y.pos, Pos { line: 4, col: 5 });
    }

    #[test]
    fn ranges_and_floats_are_told_apart() {
        let toks: Vec<Tok> = tokenize("0..150 1.5 ..10 -3")
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect();
        assert_eq!(
            toks,
            vec![
                Tok::Int(0),
                Tok::DotDot,
                Tok::Int(150),
                Tok::Float(1.5),
                Tok::DotDot,
                Tok::Int(10),
                Tok::Minus,
                Tok::Int(3),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn unterminated_string_points_at_its_start() {
        let err = tokenize("a\n  \"abc").unwrap_err();
        assert!(
            matches!(
                err,
                OmniError::Parse {
                    line: 2,
                    column: 3,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
