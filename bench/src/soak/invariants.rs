//! What the soak checks, from the operator's records
//! ([`records`](super::records)) and what the emulator stores.
//!
//! Kopf's handlers run at least once: a handler may legitimately run again
//! when the operator is SIGKILLed after the handler returned and before the
//! patch that stores its success got to the API server. So a second run of
//! one change by a new operator process is excused only when the process
//! that ran it first was SIGKILLed and the object, as stored right after the
//! kill (before the next process started), shows no sign of that success: no
//! diff-base (`last-handled-configuration`) of that state and no progress
//! record marking the handler successful. A second run within one process,
//! or after a SIGTERM (a graceful stop must store what it did), is never
//! excused.
//!
//! Bounds are counted from the end of the disturbances (faults, operator
//! restarts) in force when the thing began: a deletion during a watch gap
//! is noticed only once the watch comes back, and no operator acts while it
//! is down.
//!
//! Poisoned objects ([`poison`](super::poison)) are told apart by what the
//! operator's handlers got: each record says whether its body held the
//! poisoned nesting (`p=1`), which the operator must never decode. An
//! object created too deep has no record at all, and is never patched by
//! the operator (no finalizer, no Kopf annotation). One made too deep by a
//! change may have records meanwhile, of its last state that decoded (a
//! handler already at work, its timers and daemons going on), never of
//! the deep one.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;
use serde_json::Value;

use super::poison::Poison;
use super::records::Record;

/// The finalizer of the operator under test (Kopf's default).
pub const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

/// The diff-base annotation (Kopf's).
pub const DIFF_BASE: &str = "kopf.zalando.org/last-handled-configuration";

/// Two ticks of one timer closer than this are two copies of it (the
/// interval is 1 s, counted from the end of the previous tick).
pub const TWO_TICKS_NS: i64 = 500_000_000;

/// One broken promise.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// Which invariant (see the soak's module docs).
    pub invariant: &'static str,
    /// The object's UID, `-` for the operator as a whole.
    pub uid: String,
    /// When it was found, Unix ns.
    pub at: i64,
    /// What was seen.
    pub message: String,
}

/// What an object showed of its handling, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    /// `data.v`, `data.f` of the diff-base, if any.
    pub diff_base: Option<(String, String)>,
    /// `data.v`, `data.f` now.
    pub current: (String, String),
    /// A progress record marks the `create` handler successful.
    pub create_done: bool,
    /// … the `update` handler.
    pub update_done: bool,
    /// … the `field` handler.
    pub field_done: bool,
}

fn data_pair(data: &Value) -> (String, String) {
    let s = |k: &str| data[k].as_str().unwrap_or("-").to_string();
    (s("v"), s("f"))
}

/// A diff-base annotation's text as the operator reads it: anything but a
/// JSON object is no diff-base.
pub fn diff_base(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

impl Persisted {
    /// Reads an object as stored.
    pub fn of(cm: &ConfigMap) -> Persisted {
        let annotations = cm.metadata.annotations.clone().unwrap_or_default();
        let diff_base = annotations
            .get(DIFF_BASE)
            .and_then(|text| diff_base(text))
            .map(|essence| data_pair(&essence["data"]));
        let done = |id: &str| {
            annotations
                .get(&format!("kopf.zalando.org/{id}"))
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .is_some_and(|r| r["success"] == true)
        };
        let data = serde_json::to_value(cm.data.clone().unwrap_or_default()).unwrap_or_default();
        Persisted {
            diff_base,
            current: data_pair(&data),
            create_done: done("create"),
            update_done: done("update"),
            field_done: done("field"),
        }
    }

    fn created(&self) -> bool {
        self.diff_base.is_some() || self.create_done
    }

    fn updated(&self, state: &(String, String)) -> bool {
        self.diff_base.as_ref() == Some(state) || (self.update_done && &self.current == state)
    }

    fn field_set(&self, f: &str) -> bool {
        self.diff_base.as_ref().is_some_and(|(_, base)| base == f)
            || (self.field_done && self.current.1 == f)
    }
}

/// A span of disturbance: a fault in force, or the operator down.
#[derive(Debug, Clone)]
pub struct Window {
    /// Unix ns.
    pub start: i64,
    /// Unix ns; `None` while it lasts.
    pub end: Option<i64>,
}

/// The end of the disturbances in force at `t`, chained (`t` if none);
/// `i64::MAX` while one lasts.
pub fn calm_after(windows: &[Window], t: i64) -> i64 {
    let mut d = t;
    loop {
        let mut moved = false;
        for w in windows {
            let end = w.end.unwrap_or(i64::MAX);
            if w.start <= d && end > d {
                d = end;
                moved = true;
            }
        }
        if !moved || d == i64::MAX {
            return d;
        }
    }
}

/// What the runner knows of one object it created.
#[derive(Debug, Clone)]
pub struct Obj {
    /// Its name.
    pub name: String,
    /// Whether its handlers keep finalizers (`soak-fin=yes`).
    pub fin: bool,
    /// When its deletion was asked for, Unix ns.
    pub delete_at: Option<i64>,
    /// Whether it held the operator's finalizer when deleted.
    pub held: bool,
    /// Whether it has been seen gone.
    pub gone: bool,
    /// Whether a blocked deletion was reported already.
    pub blocked: bool,
    /// How it was poisoned at its creation, if it was.
    pub poison: Option<Poison>,
    /// Whether it is nested past the operator's limit now (from its
    /// creation on for [`Poison::Deep`], or made so by a change).
    pub deep: bool,
    /// Whether it was seen stored with a diff-base the operator wrote.
    pub handled: bool,
}

impl Obj {
    /// An object just created.
    pub fn new(name: String, fin: bool, poison: Option<Poison>) -> Obj {
        Obj {
            name,
            fin,
            delete_at: None,
            held: false,
            gone: false,
            blocked: false,
            poison,
            deep: poison == Some(Poison::Deep),
            handled: false,
        }
    }
}

/// Reads the records as they come and checks them.
#[derive(Debug, Default)]
pub struct Checker {
    /// Every record read so far.
    pub records: Vec<Record>,
    creates: HashMap<String, (u32, i64)>,
    updates: HashMap<(String, String, String), (u32, i64)>,
    fields: HashMap<(String, String), (u32, i64)>,
    /// UIDs whose delete handler ran.
    pub deletes: HashSet<String>,
    last_tick: HashMap<(String, u32), i64>,
    daemons: HashMap<(String, u32), HashSet<String>>,
    /// The latest `stat` of each process: (Unix ns, alive tasks).
    pub stats: HashMap<u32, (i64, usize)>,
    /// Records per kind.
    pub counts: BTreeMap<String, u64>,
    /// Second runs excused: the first run's process was SIGKILLed before
    /// the run was stored.
    pub excused: u64,
}

/// What the checker needs of the run's state.
pub struct Context<'a> {
    /// Objects by UID.
    pub objects: &'a HashMap<String, Obj>,
    /// Disturbances.
    pub windows: &'a [Window],
    /// The stored state of the objects right after each SIGKILL, by the
    /// killed process.
    pub kills: &'a HashMap<u32, HashMap<String, Persisted>>,
    /// The stop bound, ns.
    pub bound: i64,
}

impl Checker {
    /// Whether a create handler's run was recorded for `uid`.
    pub fn created(&self, uid: &str) -> bool {
        self.creates.contains_key(uid)
    }

    /// Checks one record; returns what it breaks.
    pub fn add(&mut self, r: Record, cx: &Context<'_>) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut violation = |invariant, message: String| {
            out.push(Violation {
                invariant,
                uid: r.uid.clone(),
                at: r.ts,
                message,
            })
        };
        *self.counts.entry(r.kind.clone()).or_default() += 1;
        if matches!(
            r.kind.as_str(),
            "create" | "update" | "field" | "delete" | "tick" | "dstart" | "dbeat" | "dstop"
        ) {
            if r.get("p") == Some("1") {
                violation(
                    "poison-skipped",
                    format!(
                        "the {} of {} got a body nested past the operator's max_depth",
                        r.kind, r.name
                    ),
                );
            } else if cx
                .objects
                .get(&r.uid)
                .is_some_and(|obj| obj.poison == Some(Poison::Deep))
            {
                violation(
                    "poison-skipped",
                    format!(
                        "the {} of {} ran, though the object never decoded",
                        r.kind, r.name
                    ),
                );
            }
        }
        let mut excused = |prev: u32, persisted: &dyn Fn(&Persisted) -> bool| {
            let excused = prev != r.pid
                && cx
                    .kills
                    .get(&prev)
                    .is_some_and(|snap| !snap.get(&r.uid).is_some_and(persisted));
            self.excused += u64::from(excused);
            excused
        };
        let state = || {
            (
                r.get("v").unwrap_or("-").to_string(),
                r.get("f").unwrap_or("-").to_string(),
            )
        };
        match r.kind.as_str() {
            "create" => {
                if let Some(&(prev, _)) = self.creates.get(&r.uid)
                    && !excused(prev, &Persisted::created)
                {
                    violation(
                        "create-once",
                        format!(
                            "the create handler of {} succeeded again in process {} after process {prev}",
                            r.name, r.pid
                        ),
                    );
                }
                self.creates.insert(r.uid.clone(), (r.pid, r.ts));
            }
            "update" => {
                let (v, f) = state();
                let key = (r.uid.clone(), v.clone(), f.clone());
                let pair = (v.clone(), f.clone());
                if let Some(&(prev, _)) = self.updates.get(&key)
                    && !excused(prev, &|p| p.updated(&pair))
                {
                    violation(
                        "update-once",
                        format!(
                            "the update handler of {} ran again for v={v} f={f} in process {} after process {prev}",
                            r.name, r.pid
                        ),
                    );
                }
                self.updates.insert(key, (r.pid, r.ts));
            }
            "field" => {
                let f = r.get("f").unwrap_or("-").to_string();
                let key = (r.uid.clone(), f.clone());
                if let Some(&(prev, _)) = self.fields.get(&key)
                    && !excused(prev, &|p| p.field_set(&f))
                {
                    violation(
                        "update-once",
                        format!(
                            "the field handler of {} ran again for f={f} in process {} after process {prev}",
                            r.name, r.pid
                        ),
                    );
                }
                self.fields.insert(key, (r.pid, r.ts));
            }
            "delete" => {
                self.deletes.insert(r.uid.clone());
            }
            "tick" | "dstart" | "dbeat" | "dstop" => {
                if let Some(obj) = cx.objects.get(&r.uid)
                    && let Some(deleted) = obj.delete_at
                {
                    let deadline = calm_after(cx.windows, deleted).saturating_add(cx.bound);
                    if r.ts > deadline {
                        violation(
                            "stop-bound",
                            format!(
                                "{} of {} at {:.1} s after its deletion, past the stop bound",
                                r.kind,
                                r.name,
                                (r.ts - deleted) as f64 / 1e9
                            ),
                        );
                    }
                }
                let key = (r.uid.clone(), r.pid);
                match r.kind.as_str() {
                    "tick" => {
                        if let Some(last) = self.last_tick.insert(key, r.ts)
                            && r.ts - last < TWO_TICKS_NS
                        {
                            violation(
                                "one-copy",
                                format!(
                                    "two ticks of the timer of {} {} ms apart (interval 1 s): two copies",
                                    r.name,
                                    (r.ts - last) / 1_000_000
                                ),
                            );
                        }
                    }
                    "dstart" => {
                        let alive = self.daemons.entry(key).or_default();
                        if !alive.is_empty() {
                            violation(
                                "one-copy",
                                format!(
                                    "a second daemon of {} started while {} ran",
                                    r.name,
                                    alive.iter().cloned().collect::<Vec<_>>().join(", ")
                                ),
                            );
                        }
                        alive.insert(r.get("i").unwrap_or("-").to_string());
                    }
                    "dstop" => {
                        if let Some(alive) = self.daemons.get_mut(&key) {
                            alive.remove(r.get("i").unwrap_or("-"));
                        }
                    }
                    _ => {}
                }
            }
            "stat" => {
                let tasks = r.get("tasks").and_then(|t| t.parse().ok()).unwrap_or(0);
                self.stats.insert(r.pid, (r.ts, tasks));
            }
            _ => {}
        }
        self.records.push(r);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> Record {
        Record::parse(line).expect("a record")
    }

    fn obj(name: &str) -> Obj {
        Obj::new(name.into(), true, None)
    }

    #[test]
    fn disturbances_in_force_chain_and_open_ones_never_end() {
        let w = |start, end| Window { start, end };
        let windows = [w(10, Some(20)), w(18, Some(30)), w(40, Some(50))];
        assert_eq!(calm_after(&windows, 5), 5);
        assert_eq!(calm_after(&windows, 12), 30);
        assert_eq!(calm_after(&windows, 35), 35);
        assert_eq!(calm_after(&[w(10, None)], 12), i64::MAX);
    }

    #[test]
    fn a_second_create_is_excused_only_after_a_kill_before_it_was_stored() {
        let objects = HashMap::from([("u".to_string(), obj("a"))]);
        let mut kills = HashMap::new();
        let check = |kills: &HashMap<u32, HashMap<String, Persisted>>, lines: &[&str]| {
            let cx = Context {
                objects: &objects,
                windows: &[],
                kills,
                bound: 1,
            };
            let mut checker = Checker::default();
            lines
                .iter()
                .flat_map(|l| checker.add(rec(l), &cx))
                .map(|v| v.invariant)
                .collect::<Vec<_>>()
        };
        let twice_in_one = ["create u a 1 10 v=0 f=0", "create u a 1 20 v=0 f=0"];
        assert_eq!(check(&kills, &twice_in_one), ["create-once"]);
        let across = ["create u a 1 10 v=0 f=0", "create u a 2 20 v=0 f=0"];
        // Process 1 was stopped gracefully (no kill snapshot): no excuse.
        assert_eq!(check(&kills, &across), ["create-once"]);
        // Killed before its success was stored: excused.
        kills.insert(1, HashMap::from([("u".to_string(), Persisted::default())]));
        assert!(check(&kills, &across).is_empty());
        // Killed after the diff-base was stored: not excused.
        let stored = Persisted {
            diff_base: Some(("0".into(), "0".into())),
            ..Persisted::default()
        };
        kills.insert(1, HashMap::from([("u".to_string(), stored)]));
        assert_eq!(check(&kills, &across), ["create-once"]);
    }

    #[test]
    fn tasks_past_the_stop_bound_and_second_copies_are_reported() {
        let mut deleted = obj("a");
        deleted.delete_at = Some(1_000);
        let objects = HashMap::from([("u".to_string(), deleted)]);
        let windows = [Window {
            start: 500,
            end: Some(2_000),
        }];
        let kills = HashMap::new();
        let cx = Context {
            objects: &objects,
            windows: &windows,
            kills: &kills,
            bound: 100,
        };
        let mut checker = Checker::default();
        // Within the bound counted from the end of the disturbance.
        assert!(checker.add(rec("tick u a 1 2050"), &cx).is_empty());
        let late = checker.add(rec("dbeat u a 1 2200 i=x"), &cx);
        assert_eq!(late[0].invariant, "stop-bound");
        let mut checker = Checker::default();
        let copies: Vec<_> = [
            "dstart w b 1 10 i=x",
            "dstart w b 1 20 i=y",
            "tick w b 1 1000000000",
            "tick w b 1 1100000000",
        ]
        .iter()
        .flat_map(|l| checker.add(rec(l), &cx))
        .map(|v| v.invariant)
        .collect();
        assert_eq!(copies, ["one-copy", "one-copy"]);
        // A stopped daemon's successor is no second copy.
        let mut checker = Checker::default();
        for l in ["dstart w b 1 10 i=x", "dstop w b 1 20 i=x"] {
            checker.add(rec(l), &cx);
        }
        assert!(checker.add(rec("dstart w b 1 30 i=y"), &cx).is_empty());
    }

    #[test]
    fn a_handler_or_task_on_a_poisoned_state_is_reported() {
        let objects = HashMap::from([
            (
                "d".to_string(),
                Obj::new("deep".into(), false, Some(Poison::Deep)),
            ),
            ("n".to_string(), obj("deepened")),
        ]);
        let kills = HashMap::new();
        let cx = Context {
            objects: &objects,
            windows: &[],
            kills: &kills,
            bound: 1,
        };
        let mut checker = Checker::default();
        let mut found = |line: &str| -> Vec<&'static str> {
            checker
                .add(rec(line), &cx)
                .into_iter()
                .map(|v| v.invariant)
                .collect()
        };
        // A deepened object's last state that decoded goes on being served.
        assert!(found("tick n deepened 1 10").is_empty());
        assert!(found("update n deepened 1 20 v=1 f=0").is_empty());
        // Never its deep state; never anything of one created deep.
        assert_eq!(found("dbeat n deepened 1 30 i=x p=1"), ["poison-skipped"]);
        assert_eq!(found("tick d deep 1 40"), ["poison-skipped"]);
        assert_eq!(found("create d deep 1 50 v=0 f=0 p=1"), ["poison-skipped"]);
        assert!(found("stat - - 1 60 tasks=3").is_empty());
    }

    #[test]
    fn the_stored_handling_is_read_from_annotations() {
        let mut cm = ConfigMap {
            data: Some([("v".into(), "2".into()), ("f".into(), "1".into())].into()),
            ..ConfigMap::default()
        };
        cm.metadata.annotations = Some(
            [
                (
                    DIFF_BASE.to_string(),
                    "{\"data\":{\"f\":\"1\",\"v\":\"1\"}}\n".to_string(),
                ),
                (
                    "kopf.zalando.org/update".to_string(),
                    "{\"started\":\"x\",\"success\":true}".to_string(),
                ),
            ]
            .into(),
        );
        let p = Persisted::of(&cm);
        assert_eq!(p.diff_base, Some(("1".into(), "1".into())));
        assert!(p.created() && p.update_done && !p.field_done);
        assert!(p.updated(&("1".into(), "1".into())));
        assert!(p.updated(&("2".into(), "1".into())), "by its progress");
        assert!(!p.updated(&("3".into(), "1".into())));
        // A diff-base the operator would not read is none.
        for garbage in ["[]", "42", "{not json"] {
            cm.metadata.annotations = Some([(DIFF_BASE.to_string(), garbage.to_string())].into());
            assert_eq!(Persisted::of(&cm).diff_base, None, "{garbage}");
        }
    }
}
