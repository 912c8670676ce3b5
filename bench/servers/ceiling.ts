// Reference "ceiling": the fastest a Fastify route can answer on this machine.
// The canonical Fastify hello-world, no logger, no plugins.

import Fastify from 'fastify';
import { announceListening } from './child.js';

const app = Fastify({ logger: false });
app.get('/', async () => ({ hello: 'world' }));

await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
announceListening(typeof address === 'object' && address ? address.port : 0, () => app.close());
