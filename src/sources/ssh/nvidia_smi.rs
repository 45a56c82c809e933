//! `nvidia-smi`'s CSV (`--format=csv,noheader,nounits`) read into devices, tolerantly: a
//! line that cannot be read is left out with a warning naming it, a field that cannot be
//! read is unknown with a warning, and `[N/A]`-style fields are unknown without one.

use crate::clock::Timestamp;
use crate::snapshot::{DeviceTelemetry, DeviceView, ProcessView, SourceWarning};
use crate::units::Bytes;

/// The `--query-gpu` fields asked for, in the order the lines carry them.
pub const GPU_FIELDS: &str =
    "index,uuid,name,memory.total,memory.used,utilization.gpu,power.draw,temperature.gpu";
/// The `--query-compute-apps` fields asked for, in the order the lines carry them.
pub const APP_FIELDS: &str = "gpu_uuid,pid,used_memory,process_name";

/// The section name warnings give for each query.
const GPU_SECTION: &str = "nvidia-smi --query-gpu";
const APP_SECTION: &str = "nvidia-smi --query-compute-apps";

/// One field as nvidia-smi wrote it.
enum Field<T> {
    /// A value.
    Known(T),
    /// `[N/A]`, `[Not Supported]`, `N/A`...: the device does not say.
    Unknown,
    /// Something else: not what the field holds.
    Bad,
}

/// Reads a field: bracketed words and `N/A` are unknown, anything `parse` refuses is bad.
fn field<T>(raw: &str, parse: impl Fn(&str) -> Option<T>) -> Field<T> {
    let s = raw.trim();
    if s.is_empty() || (s.starts_with('[') && s.ends_with(']')) || s.eq_ignore_ascii_case("n/a") {
        return Field::Unknown;
    }
    parse(s).map_or(Field::Bad, Field::Known)
}

/// A non-negative decimal number rounded to the nearest whole (`71.50` W, `37` %).
fn number(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// The devices the `--query-gpu` lines describe, sampled at `at`; `warnings` gets every
/// line or field that could not be read.
pub fn devices(text: &str, at: Timestamp, warnings: &mut Vec<SourceWarning>) -> Vec<DeviceView> {
    let mut out: Vec<DeviceView> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let where_ = format!("line {}", n + 1);
        let parts: Vec<&str> = line.split(',').map(str::trim).collect();
        if parts.len() != 8 {
            warnings.push(SourceWarning {
                section: GPU_SECTION.to_string(),
                path: where_,
                found: format!(
                    "`{}`: {} fields where 8 were asked for ({GPU_FIELDS})",
                    line.trim(),
                    parts.len()
                ),
                left_out: "this line's GPU".to_string(),
            });
            continue;
        }
        let Field::Known(index) = field(parts[0], |s| s.parse::<u32>().ok()) else {
            warnings.push(SourceWarning {
                section: GPU_SECTION.to_string(),
                path: where_,
                found: format!("`{}`: no GPU index in `{}`", line.trim(), parts[0]),
                left_out: "this line's GPU".to_string(),
            });
            continue;
        };
        let mut known = |name: &str, raw: &str| -> Option<f64> {
            match field(raw, number) {
                Field::Known(v) => Some(v),
                Field::Unknown => None,
                Field::Bad => {
                    warnings.push(SourceWarning {
                        section: GPU_SECTION.to_string(),
                        path: format!("{where_}, {name}"),
                        found: format!("`{raw}` is not a number"),
                        left_out: format!("GPU {index}'s {name}"),
                    });
                    None
                }
            }
        };
        let mib = |v: f64| Bytes::mib(v.round() as u64);
        let total = known("memory.total", parts[3]).map(mib);
        let used = known("memory.used", parts[4]).map(mib);
        let util = known("utilization.gpu", parts[5]).map(|v| v.round().min(100.0) as u32);
        let power = known("power.draw", parts[6]).map(|w| (w * 1000.0).round() as u32);
        let temp = known("temperature.gpu", parts[7]).map(|v| v.round() as u32);
        let uuid = match field(parts[1], |s| Some(s.to_string())) {
            Field::Known(u) => Some(u),
            _ => None,
        };
        let model = match field(parts[2], |s| Some(s.to_string())) {
            Field::Known(m) => m,
            _ => String::new(),
        };
        if out.iter().any(|d| d.index == index) {
            warnings.push(SourceWarning {
                section: GPU_SECTION.to_string(),
                path: where_,
                found: format!("`{}`: GPU {index} again", line.trim()),
                left_out: "this line (the first GPU of that index is shown)".to_string(),
            });
            continue;
        }
        out.push(DeviceView {
            index,
            model,
            uuid,
            memory_capacity: total,
            telemetry: Some(DeviceTelemetry {
                sampled_at: at,
                memory_total: total,
                memory_used: used,
                utilization_gpu: util,
                temperature_c: temp,
                power_mw: power,
                ..DeviceTelemetry::default()
            }),
            ..DeviceView::default()
        });
    }
    out.sort_by_key(|d| d.index);
    out
}

/// Attaches the processes the `--query-compute-apps` lines name to `devices`, by UUID.
pub fn attach_processes(text: &str, devices: &mut [DeviceView], warnings: &mut Vec<SourceWarning>) {
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let where_ = format!("line {}", n + 1);
        // A process name may hold commas: it is everything after the third.
        let parts: Vec<&str> = line.splitn(4, ',').map(str::trim).collect();
        let unreadable = |why: String| SourceWarning {
            section: APP_SECTION.to_string(),
            path: where_.clone(),
            found: format!("`{}`: {why}", line.trim()),
            left_out: "this process".to_string(),
        };
        if parts.len() != 4 {
            warnings.push(unreadable(format!(
                "{} fields where 4 were asked for ({APP_FIELDS})",
                parts.len()
            )));
            continue;
        }
        let Field::Known(pid) = field(parts[1], |s| s.parse::<u32>().ok()) else {
            warnings.push(unreadable(format!("no pid in `{}`", parts[1])));
            continue;
        };
        let Some(device) = devices.iter_mut().find(|d| {
            d.uuid
                .as_deref()
                .is_some_and(|u| u.eq_ignore_ascii_case(parts[0]))
        }) else {
            warnings.push(unreadable(format!(
                "GPU `{}` is not among the GPUs listed",
                parts[0]
            )));
            continue;
        };
        let used_memory = match field(parts[2], number) {
            Field::Known(v) => Some(Bytes::mib(v.round() as u64)),
            Field::Unknown => None,
            Field::Bad => {
                warnings.push(SourceWarning {
                    section: APP_SECTION.to_string(),
                    path: format!("{where_}, used_memory"),
                    found: format!("`{}` is not a number", parts[2]),
                    left_out: format!("process {pid}'s memory"),
                });
                None
            }
        };
        let name = match field(parts[3], |s| Some(s.to_string())) {
            Field::Known(s) => Some(s),
            _ => None,
        };
        if let Some(t) = device.telemetry.as_mut() {
            t.processes.push(ProcessView {
                pid,
                name,
                used_memory,
                claim: None,
                owner: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPUS: &str = "\
0, GPU-0a1b, NVIDIA A100-SXM4-40GB, 40960, 1234, 37, 71.50, 45
1, GPU-2c3d, NVIDIA A100-SXM4-40GB, 40960, [N/A], [N/A], [Not Supported], 44
";

    #[test]
    fn gpu_lines_become_devices_with_telemetry_and_na_is_unknown() {
        let mut w = Vec::new();
        let d = devices(GPUS, Timestamp(7), &mut w);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].model, "NVIDIA A100-SXM4-40GB");
        assert_eq!(d[0].uuid.as_deref(), Some("GPU-0a1b"));
        assert_eq!(d[0].memory_capacity, Some(Bytes::mib(40960)));
        let t = d[0].telemetry.as_ref().unwrap();
        assert_eq!(t.memory_used, Some(Bytes::mib(1234)));
        assert_eq!(t.utilization_gpu, Some(37));
        assert_eq!(t.power_mw, Some(71_500));
        assert_eq!(t.temperature_c, Some(45));
        assert_eq!(t.sampled_at, Timestamp(7));
        let t1 = d[1].telemetry.as_ref().unwrap();
        assert_eq!(
            (t1.memory_used, t1.utilization_gpu, t1.power_mw),
            (None, None, None)
        );
        assert_eq!(t1.temperature_c, Some(44));
    }

    #[test]
    fn an_unreadable_line_is_a_warning_naming_it_and_the_rest_is_kept() {
        let text = format!(
            "{GPUS}NVIDIA-SMI has failed because it couldn't communicate with the driver\n\
             x, GPU-9, Tesla, 1, 1, 1, 1, 1\n2, GPU-4e5f, Tesla T4, 15360, lots, 0, 20.1, 40\n"
        );
        let mut w = Vec::new();
        let d = devices(&text, Timestamp(0), &mut w);
        assert_eq!(d.len(), 3);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].found.contains("couldn't communicate"), "{}", w[0]);
        assert_eq!(w[0].path, "line 3");
        assert!(w[1].found.contains("no GPU index in `x`"), "{}", w[1]);
        assert_eq!(w[2].path, "line 5, memory.used");
        assert_eq!(d[2].telemetry.as_ref().unwrap().memory_used, None);
        assert_eq!(d[2].telemetry.as_ref().unwrap().utilization_gpu, Some(0));
    }

    #[test]
    fn processes_join_their_gpu_by_uuid_and_names_keep_their_commas() {
        let mut w = Vec::new();
        let mut d = devices(GPUS, Timestamp(0), &mut w);
        attach_processes(
            "GPU-2c3d, 4242, 512, python train.py --a,b\ngpu-0a1b, 77, [N/A], [Insufficient Permissions]\nGPU-ffff, 1, 1, x\n",
            &mut d,
            &mut w,
        );
        let p1 = &d[1].telemetry.as_ref().unwrap().processes;
        assert_eq!(p1.len(), 1);
        assert_eq!(p1[0].pid, 4242);
        assert_eq!(p1[0].used_memory, Some(Bytes::mib(512)));
        assert_eq!(p1[0].name.as_deref(), Some("python train.py --a,b"));
        let p0 = &d[0].telemetry.as_ref().unwrap().processes;
        assert_eq!(
            (p0[0].pid, p0[0].used_memory, p0[0].name.clone()),
            (77, None, None)
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].found.contains("`GPU-ffff` is not among"), "{}", w[0]);
    }
}
