// HTTP by hand over berthd's socket, for tests that compare answers byte for
// byte (status line, header names, case and order, body).
import net from 'node:net';

/** Writes `text` on a connection of its own; resolves with all it reads until the daemon closes it. */
export function rawExchange(socket: string, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(socket);
    const chunks: Buffer[] = [];
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    sock.on('error', reject);
    sock.write(text);
  });
}

/** An answer with its Date header blanked, to compare two answers given at different times. */
export const blankDate = (answer: string): string => answer.replace(/\r\nDate: [^\r]*\r\n/, '\r\nDate: -\r\n');
