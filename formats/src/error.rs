use std::path::PathBuf;

/// What is wrong with the bytes of a file. Display strings are complete sentences fragments
/// meant for a person: "truncated: vertex 12 of 100 ends past the end of the file".
///
/// The errors of this workspace say everything in their `Display`, the text of what caused
/// them included, and so return no `source()`: a chain printer (anyhow's `{:#}`) then says
/// each thing once.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file ends before the data its header promises.
    #[error("truncated: {0}")]
    Truncated(String),
    /// The bytes are not what the format allows.
    #[error("{0}")]
    Invalid(String),
    /// A valid file of a kind or version we do not read.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A value that must be a finite number is NaN or infinite.
    #[error("{what} is not a finite number ({value})")]
    NonFinite { what: String, value: f32 },
    /// The PLY parser rejected the file.
    #[error("PLY: {0}")]
    Ply(String),
    /// Reading or decompressing failed.
    #[error("I/O: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for ParseError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl ParseError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }

    pub(crate) fn truncated(msg: impl Into<String>) -> Self {
        Self::Truncated(msg.into())
    }
}

impl From<ply_rs_bw::parser::ParseError> for ParseError {
    fn from(e: ply_rs_bw::parser::ParseError) -> Self {
        // ply-rs-bw's messages span several lines with tabs; keep them on one line.
        let msg = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Self::Truncated(msg)
        } else {
            Self::Ply(msg)
        }
    }
}

/// A [`ParseError`] (or an I/O error) with the file it came from.
#[derive(Debug, thiserror::Error)]
#[error("{}: {error}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub error: ParseError,
}

impl FileError {
    pub fn new(path: impl Into<PathBuf>, error: impl Into<ParseError>) -> Self {
        Self { path: path.into(), error: error.into() }
    }
}
