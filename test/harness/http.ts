// Plain HTTP from the test process (the host), for servers in containers
// reached through published ports.
import http from 'node:http';
import { waitFor } from './daemon.js';

/** GET http://host:port/path; resolves with the body whatever the status, rejects on no answer within 5 s. */
export const httpGetText = (host: string, port: number, path = '/') =>
  new Promise<string>((resolve, reject) => {
    http
      .get({ host, port, path, timeout: 5000 }, (res) => {
        let body = '';
        res.on('data', (c) => {
          body += c;
        });
        res.on('end', () => resolve(body));
      })
      .on('error', reject)
      .on('timeout', function (this: http.ClientRequest) {
        this.destroy(new Error('timeout'));
      });
  });

/** The body of GET http://host:port/ once it answers (a server just started may not listen yet). */
export function httpGetWhenUp(host: string, port: number, what: string): Promise<string> {
  return waitFor(() => httpGetText(host, port).catch(() => undefined), what);
}
