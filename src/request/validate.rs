//! Which GPU form a request is: the Koordinator webhook's mutation, then the rules that
//! relate fields to each other (one form, memory and ratio, core without memory, even
//! splits...), then the form itself.

use super::form::{GpuForm, ShareMemory};
use super::parse::{Field, Given};
use super::rules::{out_of_range, reject};
use super::values::{bytes, number, small};
use super::{MAX_DEVICES, RequestError, Rule};
use crate::units::{Bytes, UNITS_PER_DEVICE, Units};

/// Mutation, then the rules between GPU fields, then the form.
pub(super) fn gpu_form(given: &Given<'_>) -> Result<Option<GpuForm>, RequestError> {
    let name = |f: Field| given.get(&f).map(|(n, _)| *n);
    let ray = [Field::NumGpus, Field::GpuMemory]
        .into_iter()
        .find_map(name);
    let koord = [
        Field::KoordMemory,
        Field::KoordRatio,
        Field::KoordCore,
        Field::KoordShared,
        Field::KoordLegacy,
    ]
    .into_iter()
    .find_map(name);
    let vendor = name(Field::Vendor);

    // Rule 1: one form only.
    if let (Some(v), Some(k)) = (vendor, koord) {
        return Err(reject(
            Rule::OneForm,
            Some(v),
            format!(
                "`{v}` (whole exclusive GPUs) cannot be combined with the share form `{k}`: give one request form"
            ),
        ));
    }
    if let (Some(r), Some(o)) = (ray, koord.or(vendor)) {
        return Err(reject(
            Rule::OneForm,
            Some(r),
            format!("the Ray form `{r}` cannot be combined with `{o}`: give one request form"),
        ));
    }
    if let Some(form) = vendor {
        let (_, v) = given[&Field::Vendor];
        return Ok(Some(GpuForm::Vendor {
            count: small(form, v, 1, MAX_DEVICES)?,
        }));
    }
    if ray.is_some() {
        return ray_form(given).map(Some);
    }
    if koord.is_some() {
        return koordinator_form(given).map(Some);
    }
    Ok(None)
}

fn ray_form(given: &Given<'_>) -> Result<GpuForm, RequestError> {
    match (given.get(&Field::NumGpus), given.get(&Field::GpuMemory)) {
        (Some(&(n, _)), Some(&(m, _))) => Err(reject(
            Rule::NumGpusWithGpuMemory,
            Some(m),
            format!(
                "`{n}` and `{m}` cannot both be given: ask by fraction (num_gpus) or by memory (gpu_memory), not both"
            ),
        )),
        (None, Some(&(m, v))) => Ok(GpuForm::RayMemory {
            memory: bytes(m, v)?,
        }),
        (Some(&(n, v)), None) => {
            let allowed =
                "a fraction 0 < f < 1 (grain 0.0001) or a whole number of GPUs up to 1024";
            let f = number(n, v, allowed)?;
            if f <= 0.0 {
                return Err(out_of_range(n, allowed));
            }
            if f > 1.0 && f.fract() != 0.0 {
                return Err(reject(
                    Rule::FractionAboveOne,
                    Some(n),
                    format!(
                        "`{n}` = {f}: a fraction above 1 cannot be shared; ask for a fraction below 1 or a whole number of GPUs"
                    ),
                ));
            }
            if f >= 1.0 {
                if f > f64::from(MAX_DEVICES) {
                    return Err(out_of_range(n, allowed));
                }
                // Whole and at most 1024, checked above.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                return Ok(GpuForm::RayWhole { count: f as u32 });
            }
            let units = (f * f64::from(UNITS_PER_DEVICE)).round();
            if units < 1.0 {
                return Err(out_of_range(n, allowed));
            }
            if units >= f64::from(UNITS_PER_DEVICE) {
                return Ok(GpuForm::RayWhole { count: 1 });
            }
            // Between 1 and 9 999, checked above.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(GpuForm::RayFraction {
                fraction: Units(units as u32),
            })
        }
        (None, None) => Err(reject(Rule::OneForm, None, "no Ray form given")),
    }
}

fn koordinator_form(given: &Given<'_>) -> Result<GpuForm, RequestError> {
    let get = |f: Field| given.get(&f).copied();
    let max_percent = 100 * MAX_DEVICES;
    let mut core = get(Field::KoordCore)
        .map(|(n, v)| small(n, v, 1, max_percent).map(|c| (n, c)))
        .transpose()?;
    let mut ratio = get(Field::KoordRatio)
        .map(|(n, v)| small(n, v, 1, max_percent).map(|r| (n, r)))
        .transpose()?;
    let memory = get(Field::KoordMemory)
        .map(|(n, v)| bytes(n, v).map(|b| (n, b)))
        .transpose()?;
    let mut legacy = false;

    // Mutation: the legacy koordinator.sh/gpu: X becomes gpu-core X + gpu-memory-ratio X.
    if let Some((n, v)) = get(Field::KoordLegacy) {
        if let Some((other, _)) = [
            get(Field::KoordCore),
            get(Field::KoordRatio),
            get(Field::KoordMemory),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(reject(
                Rule::MemoryAndRatio,
                Some(n),
                format!(
                    "the legacy `{n}` already means gpu-core and gpu-memory-ratio; it cannot be combined with `{other}`"
                ),
            ));
        }
        let x = small(n, v, 1, max_percent)?;
        core = Some((n, x));
        ratio = Some((n, x));
        legacy = true;
    }

    // Rule 2.
    if let (Some((m, _)), Some((r, _))) = (memory, ratio) {
        return Err(reject(
            Rule::MemoryAndRatio,
            Some(r),
            format!(
                "`{m}` and `{r}` cannot both be given: ask for memory in bytes or as a ratio, not both"
            ),
        ));
    }
    // Rule 3.
    if let (Some((c, _)), None, None) = (core, memory, ratio) {
        return Err(reject(
            Rule::CoreWithoutMemory,
            Some(c),
            format!(
                "`{c}` needs a memory form: add gpu-memory (bytes) or gpu-memory-ratio (percent)"
            ),
        ));
    }
    // Mutation: a missing gpu.shared is derived from the ratio.
    let shared = match (get(Field::KoordShared), ratio) {
        (Some((n, v)), _) => small(n, v, 1, MAX_DEVICES)?,
        (None, Some((_, r))) if r % 100 == 0 => r / 100,
        (None, Some(_)) => 1,
        (None, None) => {
            // Rule 4.
            let (m, _) = memory.ok_or_else(|| {
                reject(
                    Rule::MemoryWithoutShared,
                    Some("gpu.shared"),
                    "`gpu.shared` alone asks for nothing: add gpu-memory (bytes) or gpu-memory-ratio (percent)",
                )
            })?;
            return Err(reject(
                Rule::MemoryWithoutShared,
                Some(m),
                format!(
                    "`{m}` needs `gpu.shared`: say across how many devices (at least 1) the memory is split"
                ),
            ));
        }
    };
    let Some(share_memory) = memory
        .map(|(_, b)| ShareMemory::Bytes(b))
        .or(ratio.map(|(_, r)| ShareMemory::Ratio(r)))
    else {
        return Err(reject(
            Rule::MemoryWithoutShared,
            Some("gpu.shared"),
            "`gpu.shared` alone asks for nothing: add gpu-memory (bytes) or gpu-memory-ratio (percent)",
        ));
    };

    check_even_split(ratio, core, memory, shared)?;
    Ok(GpuForm::KoordinatorShare {
        memory: share_memory,
        core: core.map(|(_, c)| c),
        shared,
        legacy,
    })
}

/// Rule 9: ratio, core and memory each divide evenly across the `shared` devices.
fn check_even_split(
    ratio: Option<(&str, u32)>,
    core: Option<(&str, u32)>,
    memory: Option<(&str, Bytes)>,
    shared: u32,
) -> Result<(), RequestError> {
    let uneven = |field: &str, what: String| Err(reject(Rule::UnevenSplit, Some(field), what));
    if let Some((r, x)) = ratio {
        if x > 100 && x % 100 != 0 {
            return uneven(
                r,
                format!("`{r}` = {x}: a ratio above 100 must be a multiple of 100 (whole devices)"),
            );
        }
        if x > 100 * shared {
            return uneven(
                r,
                format!("`{r}` = {x} is more than 100 x gpu.shared ({shared}) devices can hold"),
            );
        }
        if x % shared != 0 {
            return uneven(
                r,
                format!("`{r}` = {x} does not divide evenly across gpu.shared = {shared} devices"),
            );
        }
    }
    if let Some((c, x)) = core {
        if x > 100 * shared {
            return uneven(
                c,
                format!("`{c}` = {x} is more than 100 x gpu.shared ({shared}) devices can give"),
            );
        }
        if x % shared != 0 {
            return uneven(
                c,
                format!("`{c}` = {x} does not divide evenly across gpu.shared = {shared} devices"),
            );
        }
    }
    if let Some((m, b)) = memory
        && b.0 % u64::from(shared) != 0
    {
        return uneven(
            m,
            format!(
                "`{m}` = {} bytes does not divide evenly across gpu.shared = {shared} devices",
                b.0
            ),
        );
    }
    Ok(())
}
