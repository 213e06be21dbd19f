import { createServer, type Server, Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 whose traffic can be held: while stalled, every byte either way is kept and
 * nothing is delivered, yet every connection stays open (a congested or partitioned link, not a reset);
 * on resume the held bytes go through in order.
 */
export interface StallProxy {
  port: number;
  stall(): void;
  resume(): void;
  close(): Promise<void>;
}

interface Direction {
  to: Socket;
  held: Buffer[];
}

export async function startStallProxy(targetPort: number): Promise<StallProxy> {
  let stalled = false;
  const directions = new Set<Direction>();
  const sockets = new Set<Socket>();
  const forward = (from: Socket, to: Socket) => {
    const direction: Direction = { to, held: [] };
    directions.add(direction);
    from.on('data', (chunk: Buffer) => {
      if (stalled) direction.held.push(chunk);
      else to.write(chunk);
    });
    from.once('close', () => directions.delete(direction));
  };
  const server: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client);
    sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    forward(client, upstream);
    forward(upstream, client);
    upstream.connect(targetPort, '127.0.0.1');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    stall() {
      stalled = true;
    },
    resume() {
      stalled = false;
      for (const direction of directions) {
        for (const chunk of direction.held) direction.to.write(chunk);
        direction.held = [];
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
