//! The shared JSON nesting limit ([`flowline_core::limits::MAX_JSON_DEPTH`]) on what a step reads
//! and what it produces. A Run written with kubectl can carry any payload, and a server a
//! step calls can answer anything; both fail the step with an error naming the limit.
//! (`with` values and what templates put into them are bounded while rendering.)

use serde_json::Value;

use super::actions::ActionError;
use flowline_core::crd::Run;
use flowline_core::limits::check_depth;

/// The run's trigger payload, which every step can read.
pub fn check_payload(run: &Run) -> Result<(), String> {
    match &run.spec.payload {
        Some(payload) => check_depth(payload).map_err(|e| format!("trigger payload: {e}")),
        None => Ok(()),
    }
}

/// A step's result (an action's output, a transform's value, a Job's answer) before it
/// is stored where later steps and the API read it.
pub fn check_result(result: Value) -> Result<Value, ActionError> {
    match check_depth(&result) {
        Ok(()) => Ok(result),
        Err(e) => Err(ActionError(format!("step result: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nest(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!({ "a": v }))
    }

    fn run(payload: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "flowline.io/v1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": "wf", "payload": payload},
        }))
        .unwrap()
    }

    #[test]
    fn payloads_up_to_the_limit_pass() {
        assert_eq!(check_payload(&run(nest(32))), Ok(()));
        assert_eq!(check_payload(&run(Value::Null)), Ok(()));
        assert_eq!(
            check_payload(&run(nest(33))),
            Err("trigger payload: nesting deeper than 32".into())
        );
        assert_eq!(
            check_payload(&run(nest(124))).unwrap_err(),
            "trigger payload: nesting deeper than 32"
        );
    }

    #[test]
    fn results_up_to_the_limit_pass() {
        assert_eq!(check_result(nest(32)).unwrap(), nest(32));
        assert_eq!(
            check_result(nest(33)).unwrap_err().0,
            "step result: nesting deeper than 32"
        );
    }
}
