import { createServer, type Server, Socket } from 'node:net';

export interface CuttableProxy {
  port: number;
  /** Closes every proxied connection and refuses new ones: the client behind it loses the server. */
  cut(): void;
  /** Accepts connections again, on the same port: the server "comes back". */
  restore(): void;
  close(): Promise<void>;
}

/**
 * A TCP proxy on 127.0.0.1 to a shared server (Redis, PostgreSQL) that a test can cut and restore, so
 * one client loses the server while everyone else keeps it. Hand-written: a few lines of `node:net`.
 */
export async function startCuttableProxy(target: URL, defaultPort = 6379): Promise<CuttableProxy> {
  const sockets = new Set<Socket>();
  let open = true;
  const server: Server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
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
    upstream.connect(Number(target.port || defaultPort), target.hostname, () => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('proxy has no port');
  const cut = () => {
    open = false;
    for (const socket of sockets) socket.destroy();
  };
  return {
    port: address.port,
    cut,
    restore() {
      open = true;
    },
    close: () =>
      new Promise<void>((resolve) => {
        cut();
        server.close(() => resolve());
      }),
  };
}
