//! The CPU reference of appearance.wgsl, in f64: what the kernels compute, written plainly.

use super::{BETA1, BETA2, DECAY, EPS, PARAMS};

/// One view's transform applied to one pixel: `(I + D)·c + b`, alpha kept.
#[must_use]
pub fn apply(params: &[f64; PARAMS], c: [f64; 4]) -> [f64; 4] {
    let mut out = [0.0, 0.0, 0.0, c[3]];
    for (r, value) in out.iter_mut().take(3).enumerate() {
        *value = c[r] + (0..3).map(|k| params[3 * r + k] * c[k]).sum::<f64>() + params[9 + r];
    }
    out
}

/// The backward of [`apply`] over an image: the gradient of each raw pixel from the gradient
/// of its corrected one, and the gradient of the 12 parameters (summed over the pixels).
#[must_use]
pub fn backward(
    params: &[f64; PARAMS],
    rendered: &[[f64; 4]],
    v_corrected: &[[f64; 4]],
) -> (Vec<[f64; 4]>, [f64; PARAMS]) {
    let mut grad = [0.0; PARAMS];
    let v_rendered = rendered
        .iter()
        .zip(v_corrected)
        .map(|(c, g)| {
            let mut v = [0.0, 0.0, 0.0, g[3]];
            for r in 0..3 {
                for k in 0..3 {
                    let m = params[3 * r + k] + if r == k { 1.0 } else { 0.0 };
                    v[k] += m * g[r];
                    grad[3 * r + k] += g[r] * c[k];
                }
                grad[9 + r] += g[r];
            }
            v
        })
        .collect();
    (v_rendered, grad)
}

/// Every view's parameters less their mean over the views (after each step).
pub fn recenter(params: &mut [[f64; PARAMS]]) {
    let views = params.len().max(1) as f64;
    let means: [f64; PARAMS] =
        std::array::from_fn(|k| params.iter().map(|p| p[k]).sum::<f64>() / views);
    for p in params {
        for (value, mean) in p.iter_mut().zip(means) {
            *value -= mean;
        }
    }
}

/// One Adam step of a view's parameters with the decay towards the identity; `moments` is the
/// view's row (m, v, step count).
pub fn adam_step(
    params: &mut [f64; PARAMS],
    moments: &mut [f64; 25],
    grad: &[f64; PARAMS],
    lr: f64,
) {
    let (beta1, beta2) = (f64::from(BETA1), f64::from(BETA2));
    let t = moments[24] + 1.0;
    moments[24] = t;
    for k in 0..PARAMS {
        let g = grad[k] + f64::from(DECAY) * params[k];
        let m = beta1 * moments[k] + (1.0 - beta1) * g;
        let v = beta2 * moments[12 + k] + (1.0 - beta2) * g * g;
        moments[k] = m;
        moments[12 + k] = v;
        let m_hat = m / (1.0 - beta1.powf(t));
        let v_hat = v / (1.0 - beta2.powf(t));
        params[k] -= lr * m_hat / (v_hat.sqrt() + f64::from(EPS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`backward`] against central differences of L = Σ w·apply(c) over a few pixels.
    #[test]
    fn backward_is_the_gradient_of_apply() {
        let params: [f64; PARAMS] =
            std::array::from_fn(|k| 0.3 * ((k as f64 * 1.7).sin()) - 0.05 * k as f64 / 12.0);
        let rendered: Vec<[f64; 4]> = (0..5)
            .map(|i| std::array::from_fn(|c| 0.5 + 0.4 * ((i * 4 + c) as f64 * 0.9).cos()))
            .collect();
        let weights: Vec<[f64; 4]> =
            (0..5).map(|i| std::array::from_fn(|c| ((i * 4 + c) as f64 * 2.3).sin())).collect();
        let loss = |p: &[f64; PARAMS], pixels: &[[f64; 4]]| -> f64 {
            pixels
                .iter()
                .zip(&weights)
                .map(|(c, w)| apply(p, *c).iter().zip(w).map(|(a, b)| a * b).sum::<f64>())
                .sum()
        };
        let (v_rendered, grad) = backward(&params, &rendered, &weights);
        let h = 1e-6;
        for k in 0..PARAMS {
            let (mut up, mut down) = (params, params);
            up[k] += h;
            down[k] -= h;
            let numeric = (loss(&up, &rendered) - loss(&down, &rendered)) / (2.0 * h);
            assert!((numeric - grad[k]).abs() < 1e-6, "parameter {k}: {numeric} vs {}", grad[k]);
        }
        for (i, v) in v_rendered.iter().enumerate() {
            for c in 0..4 {
                let (mut up, mut down) = (rendered.clone(), rendered.clone());
                up[i][c] += h;
                down[i][c] -= h;
                let numeric = (loss(&params, &up) - loss(&params, &down)) / (2.0 * h);
                assert!(
                    (numeric - v[c]).abs() < 1e-6,
                    "pixel {i} channel {c}: {numeric} vs {}",
                    v[c]
                );
            }
        }
    }
}
