// What this server accepts, read from its public OpenAPI document (/v1/openapi.json,
// generated from the types the handlers deserialize): the actions, trigger types and
// step fields the builder offers. A server that gains an action or a step field shows
// it here without a console change the day it ships; one without it never gets it.

let loaded = null;

const FALLBACK = {
  actions: ['http.request', 'transform', 'delay', 'fail', 'container'],
  triggers: ['manual', 'schedule'],
  stepFields: ['id', 'name', 'action', 'with', 'retry', 'timeout_ms', 'when'],
};

export function capabilities() {
  loaded = loaded || fetch('/v1/openapi.json', { cache: 'no-cache' })
    .then((res) => (res.ok ? res.json() : Promise.reject(new Error(`HTTP ${res.status}`))))
    .then((doc) => {
      const schemas = doc.components?.schemas || {};
      return {
        actions: schemas.Action?.enum || FALLBACK.actions,
        triggers: schemas.TriggerType?.enum || FALLBACK.triggers,
        stepFields: Object.keys(schemas.StepInput?.properties || {}).length
          ? Object.keys(schemas.StepInput.properties) : FALLBACK.stepFields,
      };
    })
    .catch(() => FALLBACK);
  return loaded;
}
