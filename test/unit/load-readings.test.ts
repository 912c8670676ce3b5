// When the event loop's delay readings measure load, for the overload refusals (503): not while the
// server starts, and not right after the process was stopped for a while, however the stop falls
// in the sampling interval. The clock, wall and CPU, is moved by hand.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadReadings } from '../../src/http/load-readings.js';

const SAMPLE_MS = 1_000;

function handClock() {
  const clock = { wall: 0, cpu: 0, now: () => clock.wall, cpuMs: () => clock.cpu };
  return clock;
}

/** `seconds` sample intervals, each taking `busyMs` of CPU. */
function run(clock: ReturnType<typeof handClock>, readings: ReturnType<typeof loadReadings>, seconds: number, busyMs = 50): void {
  for (let i = 0; i < seconds; i++) {
    clock.wall += SAMPLE_MS;
    clock.cpu += busyMs;
    readings.sample();
  }
}

describe('load readings', () => {
  it('measure no load until a reading has been taken wholly after the server began to listen', () => {
    const clock = handClock();
    const readings = loadReadings(SAMPLE_MS, clock);
    run(clock, readings, 5, 900);
    assert.equal(readings.measureLoad(), false, 'starting');
    readings.listening();
    run(clock, readings, 1);
    assert.equal(readings.measureLoad(), false, 'the reading still covers part of the start');
    run(clock, readings, 1);
    assert.equal(readings.measureLoad(), true);
  });

  it('measure no load right after a stop, wherever in the interval it began, until a reading wholly after it', () => {
    for (const offset of [0, 1, 500, 999]) {
      const clock = handClock();
      const readings = loadReadings(SAMPLE_MS, clock);
      readings.listening();
      run(clock, readings, 3);
      assert.equal(readings.measureLoad(), true);
      // Stopped for 4 s, `offset` ms after a sample: the next one comes that much late, and the process ran meanwhile only for the ms before the stop.
      clock.wall += SAMPLE_MS + 4_000;
      clock.cpu += offset / 20;
      readings.sample();
      assert.equal(readings.measureLoad(), false, `a stop ${offset} ms after a sample`);
      run(clock, readings, 1);
      assert.equal(readings.measureLoad(), false, `the reading after a stop ${offset} ms after a sample still covers it`);
      run(clock, readings, 1);
      assert.equal(readings.measureLoad(), true, `a stop ${offset} ms after a sample`);
    }
  });

  it('measure load when the loop was late because the process was busy', () => {
    const clock = handClock();
    const readings = loadReadings(SAMPLE_MS, clock);
    readings.listening();
    run(clock, readings, 3);
    // A sample 1.5 s late, the process running all along (a long synchronous task, a flood of requests).
    clock.wall += 2_500;
    clock.cpu += 2_400;
    readings.sample();
    assert.equal(readings.measureLoad(), true);
    // Late by less than an interval, however idle: an ordinary second.
    clock.wall += 1_900;
    clock.cpu += 10;
    readings.sample();
    assert.equal(readings.measureLoad(), true);
  });

  it('measure no load after a stop soon after the server began to listen, until a reading wholly after the stop', () => {
    const clock = handClock();
    const readings = loadReadings(SAMPLE_MS, clock);
    clock.wall += 5_000;
    readings.sample();
    assert.equal(readings.measureLoad(), false, 'not listening yet');
    readings.listening();
    clock.wall += 4_000;
    readings.sample();
    assert.equal(readings.measureLoad(), false, 'stopped since it began to listen');
    run(clock, readings, 1);
    assert.equal(readings.measureLoad(), false);
    run(clock, readings, 1);
    assert.equal(readings.measureLoad(), true);
  });
});
