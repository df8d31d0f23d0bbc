// A step's log in the run view: GET /v1/runs/{id}/steps/{step_id}/logs as text, one
// attempt (and, for a forEach step, one iteration) at a time. While the step runs, the
// log is followed: the response streams and the text grows as it arrives.

import { session } from '../api.js';
import { h, fill } from '../dom.js';

/** Steps that run in a pod have a log: container steps, and every step of a job workflow. */
export function hasLog(step, workflow) {
  return step.action === 'container' || workflow?.executor === 'job';
}

/**
 * The viewer of one step: built once, kept across the run view's redraws, told about
 * the step's newest record with `update(step)`.
 */
export function logViewer(runId, stepId) {
  const attempt = h('select', { id: `log-attempt-${stepId}`, 'aria-label': 'Attempt' });
  const iteration = h('select', { id: `log-iteration-${stepId}`, 'aria-label': 'Iteration' });
  const iterationLabel = h('label', {}, 'Iteration ', iteration);
  const text = h('pre.log', { id: `log-${stepId}`, tabindex: '0', 'aria-label': `Log of step ${stepId}` });
  const state = h('p.muted', { id: `log-state-${stepId}`, 'aria-live': 'polite' });
  const show = h('button.secondary', { type: 'button', id: `log-show-${stepId}` }, 'Show log');
  const box = h('div.log-viewer', { dataset: { step: stepId } },
    h('div.row', {}, h('label', {}, 'Attempt ', attempt), iterationLabel, show), state, text);
  let current = null;
  let reading = null;

  const options = (select, values, label) => {
    const chosen = select.value;
    fill(select, values.map((v) => h('option', { value: String(v) }, label(v))));
    if (values.map(String).includes(chosen)) select.value = chosen;
    else if (values.length) select.value = String(values[values.length - 1]);
  };

  async function load() {
    if (reading) reading.abort();
    const abort = new AbortController();
    reading = abort;
    const running = current?.status === 'running';
    const query = new URLSearchParams({ attempt: attempt.value });
    if (current?.iterations?.length) query.set('iteration', iteration.value);
    if (running) query.set('follow', 'true');
    const url = `/v1/runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(stepId)}/logs?${query}`;
    text.textContent = '';
    state.textContent = running ? 'Following the log…' : 'Loading…';
    try {
      const res = await fetch(url, {
        headers: { Authorization: `Bearer ${session.key()}`, Accept: 'text/plain' },
        cache: 'no-store',
        signal: abort.signal,
      });
      if (!res.ok) {
        const body = await res.json().catch(() => null);
        state.textContent = body?.error?.code === 'logs_not_found'
          ? 'No log: the step has not started in a pod, or its log is no longer kept.'
          : (body?.error?.message || `HTTP ${res.status}`);
        return;
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text.append(decoder.decode(value, { stream: true }));
      }
      text.append(decoder.decode());
      state.textContent = text.textContent ? '' : 'The log is empty.';
    } catch (e) {
      if (e.name !== 'AbortError') state.textContent = `The log could not be read (${e.message}).`;
    } finally {
      if (reading === abort) reading = null;
    }
  }

  show.addEventListener('click', load);
  attempt.addEventListener('change', load);
  iteration.addEventListener('change', load);

  return {
    element: box,
    update(step) {
      const was = current?.status;
      current = step;
      const attempts = Array.from({ length: Math.max(step.attempts, 1) }, (_, i) => i + 1);
      options(attempt, attempts, (n) => `#${n}`);
      const iterations = (step.iterations || []).map((i) => i.index);
      iterationLabel.hidden = iterations.length === 0;
      options(iteration, iterations, (n) => `#${n}`);
      // A followed log ends with its step; one shown while nothing streams is reread
      // when the step finishes, so it is whole.
      if (was === 'running' && step.status !== 'running' && !reading && text.textContent) load();
    },
    stop() { if (reading) reading.abort(); },
  };
}
