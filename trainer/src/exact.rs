//! Settings' floating-point values in JSON as strings in Rust's shortest round-trip notation
//! (`"0.00016"`, `"-0.0"`, `"inf"`): `serde_json`'s default number parser is not correctly
//! rounded for every value, and these strings read back bit for bit (NaN comes back as a NaN,
//! its payload not kept). Used as `#[serde(with = "crate::exact")]` on an `f32`, an `f64` or an
//! array of `f32`; checkpoints store every setting this way.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value [`serialize`] and [`deserialize`] write and read exactly.
pub trait Exact: Sized {
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>;
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;
}

pub fn serialize<T: Exact, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    value.write(serializer)
}

pub fn deserialize<'de, T: Exact, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    T::read(deserializer)
}

/// An `f32` as a JSON string in shortest round-trip notation.
#[derive(Clone, Copy)]
pub struct F32(pub f32);
/// An `f64` as a JSON string in shortest round-trip notation.
#[derive(Clone, Copy)]
pub struct F64(pub f64);

impl Serialize for F32 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{:?}", self.0))
    }
}

impl Serialize for F64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{:?}", self.0))
    }
}

fn parse_number<'de, D: Deserializer<'de>, T: std::str::FromStr>(
    deserializer: D,
) -> Result<T, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| serde::de::Error::custom(format!("\"{text}\" is not a number")))
}

impl<'de> Deserialize<'de> for F32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_number(deserializer).map(Self)
    }
}

impl<'de> Deserialize<'de> for F64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_number(deserializer).map(Self)
    }
}

impl Exact for f32 {
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        F32(*self).serialize(serializer)
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        F32::deserialize(deserializer).map(|v| v.0)
    }
}

impl Exact for f64 {
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        F64(*self).serialize(serializer)
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        F64::deserialize(deserializer).map(|v| v.0)
    }
}

impl<const N: usize> Exact for [f32; N]
where
    [F32; N]: Serialize + for<'de> Deserialize<'de>,
{
    fn write<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map(F32).serialize(serializer)
    }
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <[F32; N]>::deserialize(deserializer).map(|values| values.map(|v| v.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Values {
        #[serde(with = "crate::exact")]
        a: f32,
        #[serde(with = "crate::exact")]
        b: f64,
        #[serde(with = "crate::exact")]
        c: [f32; 3],
    }

    /// Values whose decimal form a parser that is not correctly rounded gets wrong come back
    /// as the same bits, infinities and signed zeros included.
    #[test]
    fn every_value_reads_back_as_its_bits() {
        let values = Values {
            a: f32::from_bits(0x3a83_126f),
            b: 0.1 + 0.2,
            c: [-0.0, f32::INFINITY, f32::MIN_POSITIVE / 3.0],
        };
        let json = serde_json::to_string(&values).expect("written");
        assert!(json.contains("\"-0.0\"") && json.contains("\"inf\""), "{json}");
        let back: Values = serde_json::from_str(&json).expect("read");
        assert_eq!(back.a.to_bits(), values.a.to_bits());
        assert_eq!(back.b.to_bits(), values.b.to_bits());
        assert_eq!(back.c.map(f32::to_bits), values.c.map(f32::to_bits));
        let wrong = serde_json::from_str::<Values>(&json.replace("\"inf\"", "\"a lot\""));
        assert!(wrong.is_err_and(|e| e.to_string().contains("\"a lot\" is not a number")));
    }
}
