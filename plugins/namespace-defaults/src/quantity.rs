//! Kubernetes resource quantities (`500m`, `512Mi`, `1.5`, `2e3`), checked in the
//! settings so a typo is refused when the host loads the plugin, with the setting's name,
//! instead of failing every apply with the API server's message.

/// The value of a quantity in base units (cores, bytes, counts), or why it is not one.
///
/// Accepts what the API server's parser accepts for non-negative quantities: a decimal
/// number and an optional suffix, binary (`Ki`…`Ei`), decimal (`n`, `u`, `m`, `k`, `M`…`E`)
/// or an exponent (`e3`, `E-2`).
pub fn parse(text: &str) -> Result<f64, String> {
    let invalid = || format!("{text:?} is not a quantity (e.g. 500m, 2, 512Mi, 1Gi)");
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let well_formed = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.chars().all(|c| c.is_ascii_digit() || c == '.');
    if !well_formed {
        return Err(invalid());
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let power = exponent
                .strip_prefix(['e', 'E'])
                .and_then(|p| p.parse::<i32>().ok())
                .ok_or_else(invalid)?;
            10f64.powi(power)
        }
    };
    Ok(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suffix_scales_as_kubernetes_scales_it() {
        for (text, value) in [
            ("1", 1.0),
            ("500m", 0.5),
            ("1.5", 1.5),
            ("+2", 2.0),
            ("1k", 1000.0),
            ("512Mi", 512.0 * 1024.0 * 1024.0),
            ("1Gi", 1024f64.powi(3)),
            ("2e3", 2000.0),
            ("5E-1", 0.5),
            (".5", 0.5),
        ] {
            assert_eq!(parse(text), Ok(value), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_examples() {
        for bad in ["", "-1", "1.2.3", "one", "1 Gi", "1gb", "1e", ".", "Mi"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("is not a quantity (e.g."), "{bad}: {e}");
        }
    }
}
