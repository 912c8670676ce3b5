// A server of a run once started, whichever it is (see servers.ts for each one and how it starts).
import type { ManagedProcess } from './proc.js';

/** The servers a probe can ask for. */
export type ServerId = 'slipway' | 'ceiling' | 'oidc' | 'floor' | 'writeFloor';

export interface RunningServer {
  id: ServerId;
  label: string;
  baseUrl: string;
  process: ManagedProcess;
}

export interface ServerStartOptions {
  runDir: string;
  cpu: number | undefined;
}
