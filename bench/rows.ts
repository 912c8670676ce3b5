// The rows of the table. A row = the Slipway probe, the reference probe it is
// compared with (measured in the same run), and the target from the issue.
//
// To add a row: write a Probe (in probes/, or a reference in references.ts), then
// append { id, title, subject, reference, target } to ROWS. Targets come from
// lib/harness.ts: throughputAtLeast(f, name), p50AtMost(f, name), p99AtMostMs(ms).
// A probe that needs a new server adds it to lib/servers.ts; one that needs a
// new client adds a job kind to lib/load-protocol.ts and bench/load.ts.
//
// Rows run in this order against one Slipway process, so each writes into a
// database that holds what the rows before it wrote.

import { p50AtMost, p99AtMostMs, type Row, throughputAtLeast } from './lib/harness.js';
import { slipwayListOrgs, slipwayToken } from './probes/auth.js';
import { slipwayClaimLatency, slipwayCreateDeployment } from './probes/deployments.js';
import { slipwayBulkCreate, slipwayBulkUpsert, slipwayPatchKey } from './probes/secrets.js';
import { ceiling, floorBulkCreate, floorCreateDeployment, floorPatchKey, oidcToken } from './references.js';

export const ROWS: Row[] = [
  {
    id: 'orgs',
    title: 'GET /v1/orgs, authorized',
    subject: slipwayListOrgs,
    reference: ceiling,
    target: throughputAtLeast(0.5, 'ceiling'),
  },
  {
    id: 'token',
    title: 'token endpoint, client_credentials',
    subject: slipwayToken,
    reference: oidcToken,
    target: throughputAtLeast(2, 'oidc-provider'),
  },
  {
    id: 'bulk-create',
    title: 'bulk create 1,000 secrets',
    subject: slipwayBulkCreate,
    reference: floorBulkCreate,
    target: p50AtMost(2, 'floor'),
  },
  {
    id: 'patch-key',
    title: 'PATCH one secret key',
    subject: slipwayPatchKey,
    reference: ceiling,
    target: throughputAtLeast(0.2, 'ceiling'),
  },
  {
    // Beside the row: how far the PATCH is from the least work that does the same job.
    id: 'patch-key-floor',
    title: 'PATCH one secret key, against its floor',
    subject: slipwayPatchKey,
    reference: floorPatchKey,
    target: throughputAtLeast(0.5, 'PATCH floor'),
  },
  {
    // Whether the PATCH target can be met on this machine at all: the floor against it.
    id: 'patch-floor',
    title: 'the PATCH floor itself, against the issue\'s PATCH target',
    subject: floorPatchKey,
    reference: ceiling,
    target: throughputAtLeast(0.2, 'ceiling'),
  },
  {
    // The issue compares the upsert with the bulk-create floor, not with an upsert floor.
    id: 'bulk-upsert',
    title: 'bulk upsert 1,000 secrets, half existing',
    subject: slipwayBulkUpsert,
    reference: floorBulkCreate,
    target: p50AtMost(2, 'floor'),
  },
  {
    id: 'deployments',
    title: 'create a deployment',
    subject: slipwayCreateDeployment,
    reference: ceiling,
    target: throughputAtLeast(0.2, 'ceiling'),
  },
  {
    id: 'deployments-floor',
    title: 'create a deployment, against its floor',
    subject: slipwayCreateDeployment,
    reference: floorCreateDeployment,
    target: throughputAtLeast(0.5, 'deployment floor'),
  },
  {
    id: 'deployments-floor-ceiling',
    title: 'the deployment floor itself, against the issue\'s deployment target',
    subject: floorCreateDeployment,
    reference: ceiling,
    target: throughputAtLeast(0.2, 'ceiling'),
  },
  {
    id: 'claim-latency',
    title: 'create → claim by a waiting runner',
    subject: slipwayClaimLatency,
    target: p99AtMostMs(50),
  },
];
