// The end of the event loop's turn: one promise for everyone who asks during a turn, resolved in
// the check phase, and a new one for the next turn.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { endOfTurn } from '../../src/http/end-of-turn.js';

describe('endOfTurn', () => {
  it('gives everyone in a turn the same promise, resolved in the check phase, and a new one the turn after', async () => {
    const turnEnds = endOfTurn();
    const order: string[] = [];
    setImmediate(() => order.push('immediate queued before'));
    const first = turnEnds();
    assert.equal(turnEnds(), first);
    void first.then(() => order.push('turn ended'));
    await Promise.resolve();
    assert.deepEqual(order, [], 'not before the check phase');
    await first;
    assert.deepEqual(order, ['immediate queued before', 'turn ended']);
    const next = turnEnds();
    assert.notEqual(next, first);
    await next;
  });
});
