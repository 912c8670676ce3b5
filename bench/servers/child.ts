// Shared by the reference servers: they are started by bench/lib/servers.ts
// with an IPC channel, listen on an ephemeral port on 127.0.0.1, announce it,
// and exit when told to (SIGTERM) or when the orchestrator goes away.

export interface ListeningMessage {
  type: 'listening';
  port: number;
}

export function announceListening(port: number, onStop: () => void | Promise<void> = () => undefined): void {
  const stop = (): void => {
    Promise.resolve()
      .then(onStop)
      .finally(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('disconnect', stop);
  const message: ListeningMessage = { type: 'listening', port };
  process.send?.(message);
}

export function requireEnv(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}
