//! Time axes: a round step (1, 2 or 5 times a power of ten) and the ticks it puts between the
//! ends, shared by the timeline, the latency chart and its time buckets.

/// The round step (1, 2 or 5 × 10ⁿ) that cuts `span` into at most `max_parts` parts; 1 for a
/// span that is not a positive finite number or for no parts at all.
pub fn nice_step(span: f64, max_parts: usize) -> f64 {
    if !span.is_finite() || span <= 0.0 || max_parts == 0 {
        return 1.0;
    }
    let raw = span / max_parts as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&step| step >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// Ticks from 0 to `span` inclusive (within rounding) at the [`nice_step`] for at most
/// `max_parts` parts: never empty (at least the 0 tick).
pub fn ticks(span: f64, max_parts: usize) -> Vec<f64> {
    let step = nice_step(span, max_parts);
    if !span.is_finite() || span <= 0.0 {
        return vec![0.0];
    }
    let n = (span / step + 1e-9).floor() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick's text in seconds, with as many decimals as the step needs (`2.5 s`, `10 s`,
/// `0.25 s`).
pub fn tick_label(seconds: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil().clamp(0.0, 6.0) as usize
    };
    // A step of 0.25 would need two decimals, 0.2 one: allow one more where the step is not a
    // power of ten.
    let decimals = if step < 1.0 && (step * 10f64.powi(decimals as i32)).fract().abs() > 1e-6 {
        decimals + 1
    } else {
        decimals
    };
    format!("{seconds:.decimals$} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round_and_fit_the_parts() {
        assert_eq!(nice_step(20.0, 10), 2.0);
        assert_eq!(nice_step(45.0, 10), 5.0);
        assert_eq!(nice_step(3.0, 10), 0.5);
        assert_eq!(nice_step(100.0, 10), 10.0);
        assert!((nice_step(0.07, 10) - 0.01).abs() < 1e-12);
        for span in [0.003, 0.9, 7.0, 33.0, 61.0, 1234.0] {
            let step = nice_step(span, 12);
            assert!(span / step <= 12.0 + 1e-9, "{span}: {step}");
            assert!(span / step >= 2.4, "{span}: {step} too coarse");
        }
    }

    #[test]
    fn odd_spans_give_one_tick_and_no_panic() {
        assert_eq!(ticks(0.0, 10), vec![0.0]);
        assert_eq!(ticks(-3.0, 10), vec![0.0]);
        assert_eq!(ticks(f64::NAN, 10), vec![0.0]);
        assert_eq!(nice_step(5.0, 0), 1.0);
    }

    #[test]
    fn ticks_cover_the_span() {
        assert_eq!(
            ticks(20.0, 10),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
        );
        let t = ticks(23.4, 10);
        assert_eq!(t.first(), Some(&0.0));
        assert_eq!(t.last(), Some(&20.0));
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn labels_have_the_decimals_the_step_needs() {
        assert_eq!(tick_label(10.0, 5.0), "10 s");
        assert_eq!(tick_label(2.5, 0.5), "2.5 s");
        assert_eq!(tick_label(0.25, 0.05), "0.25 s");
        assert_eq!(tick_label(0.2, 0.2), "0.2 s");
    }
}
