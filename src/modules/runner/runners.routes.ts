import type { App } from '../../http/app-types.js';
import { OrgParams } from '../../http/schemas.js';
import { RunnerList, RunnerListQuery } from './runners.schemas.js';
import type { RunnersService } from './runners.service.js';

export function runnersRoutes(app: App, deps: { runners: RunnersService }): void {
  const { runners } = deps;

  app.get('/v1/orgs/:orgId/runners', {
    config: { auth: 'viewer', operation: 'runners.list' },
    schema: {
      tags: ['runner'],
      summary: 'List the organization\'s runners, online and offline',
      description: 'Each runner process that names itself (`host`, as `slipway runner` does): which service user it signs in as, the environments it takes deployments from, '
        + 'when it was last heard from (a claim, a heartbeat, a serving report or an adoption; up to 10 s late), whether that makes it `online`, and what it carries out. '
        + 'A runner started again is a new entry; one not heard from for 7 days is forgotten. `environment` answers whether anything will take that environment\'s deployments.',
      params: OrgParams,
      querystring: RunnerListQuery,
      response: { 200: RunnerList },
    },
  }, async (req) => {
    const page = await runners.list(req.org!.id, req.query);
    return { runners: page.items, onlineWithinSeconds: runners.onlineWithinSeconds, nextCursor: page.nextCursor };
  });
}
