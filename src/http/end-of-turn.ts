// The end of the event loop's current turn, as a promise: it resolves in the check phase
// (setImmediate), after the poll phase has run the I/O callbacks of what arrived. Everyone who
// asks during one turn gets the same promise, so a turn costs one immediate however many wait.

/** Returns `turnEnds()`, which resolves at the end of the current turn of the event loop. */
export function endOfTurn(): () => Promise<void> {
  let next: Promise<void> | null = null;
  return () => (next ??= new Promise((resolve) => setImmediate(() => {
    next = null;
    resolve();
  })));
}
