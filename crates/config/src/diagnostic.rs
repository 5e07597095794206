//! Diagnostics: what `switchyard check` prints.
//!
//! A [`Diagnostic`] is located by file, 1-based line and 1-based column
//! (counted in characters, not bytes) and displays as
//! `FILE:LINE:COL: error: message`, followed by `  hint: text` on a second
//! line when there is a hint. [`Report`] is the crate-internal collector that
//! turns byte spans from the TOML parser into those positions.

use std::fmt;
use std::ops::Range;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The configuration is refused.
    Error,
    /// Worth fixing, but the configuration is accepted.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file as it was named to [`crate::load`] or [`crate::parse`].
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, on one line.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}: {}", self.file, self.line, self.col, self.severity, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every diagnostic found in one file, sorted by position.
///
/// Displays one diagnostic after another, separated by newlines (no trailing
/// newline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// True when at least one diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Error)
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Warning)
    }

    /// True when there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of diagnostics.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// All diagnostics, in position order.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Collects diagnostics for one source text, locating byte spans.
pub(crate) struct Report<'s> {
    file: String,
    source: &'s str,
    line_starts: Vec<usize>,
    diags: Vec<Diagnostic>,
}

impl<'s> Report<'s> {
    pub(crate) fn new(source: &'s str, file: &str) -> Self {
        let line_starts = std::iter::once(0).chain(source.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Report { file: file.to_string(), source, line_starts, diags: Vec::new() }
    }

    /// 1-based line and character column of a byte offset.
    pub(crate) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.source.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts[line - 1];
        let col = self.source.get(start..offset).map_or(0, |s| s.chars().count());
        (line, col + 1)
    }

    /// 1-based line of a span, for messages such as "first defined at line 3".
    pub(crate) fn line_of(&self, span: &Range<usize>) -> usize {
        self.position(span.start).0
    }

    pub(crate) fn push(
        &mut self,
        severity: Severity,
        span: &Range<usize>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        let (line, col) = self.position(span.start);
        self.diags.push(Diagnostic { file: self.file.clone(), line, col, severity, message: message.into(), hint });
    }

    /// Records an error without a hint.
    pub(crate) fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        self.push(Severity::Error, span, message, None);
    }

    /// Records an error with a hint.
    pub(crate) fn error_hint(&mut self, span: &Range<usize>, message: impl Into<String>, hint: impl Into<String>) {
        self.push(Severity::Error, span, message, Some(hint.into()));
    }

    /// Records a warning with an optional hint.
    pub(crate) fn warning(&mut self, span: &Range<usize>, message: impl Into<String>, hint: Option<String>) {
        self.push(Severity::Warning, span, message, hint);
    }

    /// Number of errors (not warnings) recorded so far.
    pub(crate) fn error_count(&self) -> usize {
        self.diags.iter().filter(|d| d.severity == Severity::Error).count()
    }

    /// True when an error (not a warning) was recorded.
    pub(crate) fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| d.severity == Severity::Error)
    }

    /// Ends collection: diagnostics sorted by position (stable, so two at
    /// the same place keep the order they were found in).
    pub(crate) fn finish(mut self) -> Diagnostics {
        self.diags.sort_by_key(|d| (d.line, d.col));
        Diagnostics(self.diags)
    }
}
