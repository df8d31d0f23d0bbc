// Starter templates offered while an account has no workflow: each opens the builder
// with a workflow that runs as it is (no payload needed), to be saved or changed.

export const STARTERS = [
  {
    key: 'diamond',
    title: 'Two branches, then a join',
    text: 'A step, two steps that run in parallel after it, and one that waits for both and combines their outputs.',
    needs: ['transform'],
    workflow: {
      name: 'Two branches, then a join',
      trigger: { type: 'manual' },
      steps: [
        { id: 'start', action: 'transform', with: { value: { run: '{{ run.id }}' } } },
        { id: 'left', action: 'transform', needs: ['start'], with: { value: 'left of {{ steps.start.output.run }}' } },
        { id: 'right', action: 'transform', needs: ['start'], with: { value: 'right of {{ steps.start.output.run }}' } },
        { id: 'join', action: 'transform', needs: ['left', 'right'], with: { value: { left: '{{ steps.left.output }}', right: '{{ steps.right.output }}' } } },
      ],
    },
  },
  {
    key: 'approval',
    title: 'Ask for an approval',
    text: 'Prepares a request, waits until someone approves or rejects it (from the run page or the Runs page), then records the decision.',
    needs: ['transform', 'approval'],
    workflow: {
      name: 'Ask for an approval',
      trigger: { type: 'manual' },
      steps: [
        { id: 'prepare', action: 'transform', with: { value: { request: '{{ run.id }}' } } },
        { id: 'approve', action: 'approval', with: { timeout_ms: 86400000 } },
        { id: 'record', action: 'transform', with: { value: { approved: '{{ steps.approve.output.approved }}', comment: '{{ steps.approve.output.comment }}' } } },
      ],
    },
  },
  {
    key: 'fan-out',
    title: 'Fan out over a list',
    text: 'Runs one step once per item of a list (for each), a few at a time, and collects the results in order.',
    needs: ['transform', 'delay', 'for_each'],
    workflow: {
      name: 'Fan out over a list',
      trigger: { type: 'manual' },
      steps: [
        { id: 'items', action: 'transform', with: { value: ['a', 'b', 'c'] } },
        { id: 'each', action: 'transform', for_each: '{{ steps.items.output }}', with: { value: { item: '{{ item }}', index: '{{ index }}' } } },
        { id: 'pause', action: 'delay', with: { ms: 500 } },
      ],
    },
  },
];

/** The starters this server can run (its actions and step fields, schema.js). */
export function startersFor(accepts) {
  return STARTERS.filter((t) => t.needs.every((n) => accepts.actions.includes(n) || accepts.stepFields.includes(n)));
}
