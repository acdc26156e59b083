//! How Cog models are declared to a runner (`RUNNER_COG`, `RUNNER_COG_TRAIN`): each item is
//! `owner/name=[capability@]http://host:port`, a server someone else runs, or
//! `owner/name=[capability@]dir:/path[?settings]`, a Cog project whose server the runner runs
//! ([`super::instance`]); its settings are those of [`InstanceSettings`].

use std::{path::PathBuf, time::Duration};

use common::domain::ModelRef;
use url::Url;

use super::instance::InstanceSettings;

/// One configured Cog model: `owner/name=[capability@]http://host:port`, or
/// `owner/name=[capability@]dir:/path[?idle_seconds=N&min_instances=N&max_instances=N&setup_timeout=S]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CogTarget {
    /// The address it is served under.
    pub model: ModelRef,
    /// Its declared kind (default `text-generation`).
    pub capability: String,
    /// Where it runs.
    pub source: CogSource,
}

/// Where a Cog model runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CogSource {
    /// A server someone else runs (a sidecar, a server started by hand).
    Server(Url),
    /// A Cog project whose servers the runner starts and stops itself.
    Project {
        /// Its directory.
        dir: PathBuf,
        /// Its instances.
        settings: InstanceSettings,
    },
}

/// Parses `acme/echo=http://127.0.0.1:5000,acme/up=image-to-image@dir:/models/up?idle_seconds=60`,
/// a project's instance settings defaulting to `defaults`.
pub fn parse_targets_with(text: &str, defaults: &InstanceSettings) -> Result<Vec<CogTarget>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (model, rest) =
                item.split_once('=').ok_or_else(|| format!("{item:?} is not owner/name=URL or owner/name=dir:PATH"))?;
            let model: ModelRef = model.trim().parse().map_err(|e| format!("{model:?}: {e}"))?;
            let (capability, source) = match rest.split_once('@') {
                Some((c, u)) if !c.contains("://") && !c.starts_with("dir:") => (c.trim().to_owned(), u.trim()),
                _ => ("text-generation".to_owned(), rest.trim()),
            };
            let source = match source.strip_prefix("dir:") {
                Some(project) => parse_project(project, defaults)?,
                None => CogSource::Server(Url::parse(source).map_err(|e| format!("{source:?}: {e}"))?),
            };
            Ok(CogTarget { model, capability, source })
        })
        .collect()
}

/// Parses `acme/echo=http://127.0.0.1:5000,...` with the default instance settings.
pub fn parse_targets(text: &str) -> Result<Vec<CogTarget>, String> {
    parse_targets_with(text, &InstanceSettings::default())
}

/// `/path[?idle_seconds=N&min_instances=N&max_instances=N&setup_timeout=S]`.
fn parse_project(text: &str, defaults: &InstanceSettings) -> Result<CogSource, String> {
    let (dir, query) = text.split_once('?').unwrap_or((text, ""));
    if dir.is_empty() {
        return Err(format!("{text:?} names no project directory"));
    }
    let mut settings = defaults.clone();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not key=value"))?;
        let number = || value.parse::<u64>().map_err(|_| format!("{key}={value:?} is not a whole number"));
        match key {
            "idle_seconds" => settings.idle = Duration::from_secs(number()?),
            "min_instances" => settings.min_instances = number()? as usize,
            "max_instances" => settings.max_instances = number()? as usize,
            "setup_timeout" => settings.setup_timeout = Some(Duration::from_secs(number()?)).filter(|d| !d.is_zero()),
            other => {
                return Err(format!(
                    "{other:?} is not a setting of a project (idle_seconds, min_instances, max_instances, setup_timeout)"
                ));
            }
        }
    }
    check_instances(&settings)?;
    Ok(CogSource::Project { dir: PathBuf::from(dir), settings })
}

/// The most instances of one project a runner starts (a bound against a mistyped setting:
/// each is a process with the model in its memory).
pub const MAX_INSTANCES: usize = 64;

/// Instance counts that make sense: at least one instance at most, no more than
/// [`MAX_INSTANCES`], and no more kept than allowed.
pub fn check_instances(settings: &InstanceSettings) -> Result<(), String> {
    if !(1..=MAX_INSTANCES).contains(&settings.max_instances) {
        return Err(format!("max_instances {} is not between 1 and {MAX_INSTANCES}", settings.max_instances));
    }
    if settings.min_instances > settings.max_instances {
        return Err(format!(
            "min_instances {} is over max_instances {}",
            settings.min_instances, settings.max_instances
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_an_optional_capability() {
        let t = parse_targets("acme/echo=http://127.0.0.1:5000, acme/up=image-to-image@http://h:1/").expect("valid");
        assert_eq!(t[0].model.to_string(), "acme/echo");
        assert_eq!(t[0].capability, "text-generation");
        assert_eq!(t[1].capability, "image-to-image");
        assert_eq!(t[1].source, CogSource::Server(Url::parse("http://h:1/").expect("url")));
        assert!(parse_targets("acme/echo").is_err());
        assert!(parse_targets("Acme/echo=http://h").is_err());
    }

    #[test]
    fn a_project_is_declared_by_its_directory_with_its_instance_settings() {
        let defaults = InstanceSettings { idle: Duration::from_secs(30), ..InstanceSettings::default() };
        let t = parse_targets_with(
            "acme/a=dir:/m/a, acme/b=text-to-image@dir:/m/b?idle_seconds=5&min_instances=1&max_instances=3&setup_timeout=600",
            &defaults,
        )
        .expect("valid");
        assert_eq!(t[0].source, CogSource::Project { dir: "/m/a".into(), settings: defaults.clone() });
        let settings = InstanceSettings {
            min_instances: 1,
            max_instances: 3,
            idle: Duration::from_secs(5),
            setup_timeout: Some(Duration::from_secs(600)),
        };
        assert_eq!(
            (t[1].capability.as_str(), &t[1].source),
            ("text-to-image", &CogSource::Project { dir: "/m/b".into(), settings })
        );
        for bad in [
            "acme/a=dir:",
            "acme/a=dir:/m?idle=5",
            "acme/a=dir:/m?idle_seconds=x",
            "acme/a=dir:/m?max_instances=0",
            "acme/a=dir:/m?max_instances=65",
            "acme/a=dir:/m?min_instances=2",
            "acme/a=dir:/m?min_instances=3&max_instances=2",
        ] {
            assert!(parse_targets(bad).is_err(), "{bad}");
        }
    }
}
