// The deployment state graph, checked edge by edge against the design's drawing.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  allowedFrom, canTransition, DEPLOYMENT_STATES, FINISHED_STATES, isDeploymentState, TRANSITIONS, transitionConflict, UNFINISHED_STATES,
  type DeploymentState,
} from '../../src/modules/deployments/deployment-states.js';

// queued ──claim──▶ in_progress ──▶ succeeded ──(a newer one succeeds)──▶ superseded
//    │                 │    ╰──────▶ failed
//    ╰──cancel──▶ cancelled ◀──cancel──╯
// in_progress ──lease expired──▶ queued (attempt+1, up to a limit, then failed)
const EDGES: Array<[DeploymentState, DeploymentState]> = [
  ['queued', 'in_progress'],
  ['queued', 'cancelled'],
  ['in_progress', 'succeeded'],
  ['in_progress', 'failed'],
  ['in_progress', 'cancelled'],
  ['in_progress', 'queued'],
  ['succeeded', 'superseded'],
];

describe('deployment state graph', () => {
  it('has exactly the states and the edges of the design', () => {
    assert.deepEqual([...DEPLOYMENT_STATES].sort(), ['cancelled', 'failed', 'in_progress', 'queued', 'succeeded', 'superseded']);
    const edges = DEPLOYMENT_STATES.flatMap((from) => Object.keys(TRANSITIONS[from]).map((to) => `${from}→${to}`));
    assert.deepEqual(edges.sort(), EDGES.map(([f, t]) => `${f}→${t}`).sort());
  });

  it('answers every pair of states', () => {
    for (const from of DEPLOYMENT_STATES) {
      for (const to of DEPLOYMENT_STATES) {
        const expected = EDGES.some(([f, t]) => f === from && t === to);
        assert.equal(canTransition(from, to), expected, `${from} → ${to}`);
      }
      assert.deepEqual(allowedFrom(from).sort(), EDGES.filter(([f]) => f === from).map(([, t]) => t).sort());
    }
  });

  it('names every edge by what causes it', () => {
    for (const [from, to] of EDGES) assert.ok((TRANSITIONS[from][to] ?? '').length > 0, `${from} → ${to}`);
  });

  it('leaves failed, cancelled and superseded with no way out', () => {
    for (const state of ['failed', 'cancelled', 'superseded'] as const) assert.deepEqual(allowedFrom(state), []);
  });

  it('groups the states that block deletion and the ones that end a run', () => {
    assert.deepEqual([...UNFINISHED_STATES].sort(), ['in_progress', 'queued']);
    assert.deepEqual([...FINISHED_STATES].sort(), ['cancelled', 'failed', 'succeeded']);
    for (const s of UNFINISHED_STATES) assert.ok(allowedFrom(s).length > 0);
  });

  it('refuses a move off the graph with a 409 that lists the allowed moves', () => {
    for (const from of DEPLOYMENT_STATES) {
      for (const to of DEPLOYMENT_STATES.filter((t) => !canTransition(from, t))) {
        const error = transitionConflict('dep_x', from, to);
        assert.equal(error.status, 409);
        assert.equal(error.code, 'invalid_transition');
        assert.deepEqual(error.extras, { state: from, requested: to, allowedTransitions: allowedFrom(from) });
        assert.match(error.detail, allowedFrom(from).length > 0
          ? new RegExp(`is ${from} and cannot become ${to}; from ${from} it can only become ${allowedFrom(from).join(', ')}\\.${from === 'succeeded' && to === 'cancelled' ? ' It serves now: to replace it, roll back' : '$'}`)
          : new RegExp(`is ${from === to ? 'already ' : ''}${from}, a final state: it cannot become ${to}${from === to ? ' again' : ''}, nor anything else\\.$`));
      }
    }
  });

  it('tells states from other strings', () => {
    for (const s of DEPLOYMENT_STATES) assert.ok(isDeploymentState(s));
    for (const s of ['', 'running', 'QUEUED', 'in-progress']) assert.ok(!isDeploymentState(s));
  });
});
