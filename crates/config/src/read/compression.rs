//! Reader of a service's `compression` table (or `compression = BOOL`).

use toml::de::DeTable;

use super::{boolean, entries, integer, size, strings, unknown_key};
use crate::diagnostic::Report;
use crate::raw::*;

const COMPRESSION_KEYS: &[&str] =
    &["algorithms", "types", "min_size", "max_size", "gzip_level", "brotli_level", "zstd_level", "decompress"];

pub(super) fn read_compression(r: &mut Report<'_>, table: &DeTable<'_>) -> RawCompression {
    let mut raw = RawCompression::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "algorithms" => raw.algorithms = strings(r, name, value),
            "types" => raw.types = strings(r, name, value),
            "min_size" => raw.min_size = size(r, name, value),
            "max_size" => raw.max_size = size(r, name, value),
            "gzip_level" => raw.gzip_level = integer(r, name, value),
            "brotli_level" => raw.brotli_level = integer(r, name, value),
            "zstd_level" => raw.zstd_level = integer(r, name, value),
            "decompress" => raw.decompress = boolean(r, name, value),
            _ => {
                unknown_key(r, key, COMPRESSION_KEYS, "in `compression`");
            }
        }
    }
    raw
}
