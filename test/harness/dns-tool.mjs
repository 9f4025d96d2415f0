// DNS over UDP for tests, run inside a test network namespace, in one of two roles:
//   node dns-tool.mjs serve <listen address> <answer address>
//     A stand-in for the host's resolver where there is no outside network:
//     answers every A question with one address, any other with no answer, and
//     prints each question (`<name> <type>`) on stdout.
//   node dns-tool.mjs ask
//     A client that stays up, so a question goes out the moment it is asked:
//     reads `<name> <server> [timeout ms]` lines, sends each one A question,
//     once, and prints a JSON line {name, rcode, answers} or {name, error}
//     (ECONNREFUSED when nothing listens, timeout after 2 s unless told).
import dgram from 'node:dgram';
import { createInterface } from 'node:readline';

const [role, ...args] = process.argv.slice(2);

/** The question's name, and the offset after its type and class. */
function question(msg) {
  const labels = [];
  let o = 12;
  while (msg[o]) {
    labels.push(msg.subarray(o + 1, o + 1 + msg[o]).toString('latin1'));
    o += msg[o] + 1;
  }
  return { name: labels.join('.'), type: msg.readUInt16BE(o + 1), end: o + 5 };
}

function serve(listen, answer) {
  const socket = dgram.createSocket('udp4');
  socket.on('message', (query, peer) => {
    const q = question(query);
    process.stdout.write(`${q.name} ${q.type}\n`);
    const header = Buffer.from(query.subarray(0, 12));
    header.writeUInt16BE(0x8180, 2); // a response, recursion desired and available, no error
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(q.type === 1 ? 1 : 0, 6);
    header.writeUInt32BE(0, 8);
    const parts = [header, query.subarray(12, q.end)];
    if (q.type === 1) {
      const record = Buffer.alloc(16);
      record.writeUInt16BE(0xc00c, 0); // the question's name
      record.writeUInt16BE(1, 2); // A
      record.writeUInt16BE(1, 4); // IN
      record.writeUInt32BE(60, 6);
      record.writeUInt16BE(4, 10);
      for (const [i, b] of answer.split('.').entries()) record.writeUInt8(Number(b), 12 + i);
      parts.push(record);
    }
    socket.send(Buffer.concat(parts), peer.port, peer.address);
  });
  socket.bind(53, listen, () => process.stdout.write('ready\n'));
}

/** The A records of a response (names skipped: a pointer or labels). */
function answersOf(msg) {
  const count = msg.readUInt16BE(6);
  let o = question(msg).end;
  const found = [];
  for (let i = 0; i < count; i++) {
    while (msg[o] && msg[o] < 0xc0) o += msg[o] + 1;
    o += msg[o] >= 0xc0 ? 2 : 1;
    const type = msg.readUInt16BE(o);
    const length = msg.readUInt16BE(o + 8);
    if (type === 1 && length === 4) found.push([...msg.subarray(o + 10, o + 14)].join('.'));
    o += 10 + length;
  }
  return found;
}

function ask(name, server, timeoutMs) {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const id = Math.floor(Math.random() * 0xffff);
    const done = (result) => {
      clearTimeout(timer);
      socket.close();
      resolve({ name, ...result });
    };
    const timer = setTimeout(() => done({ error: 'timeout' }), timeoutMs);
    socket.on('error', (e) => done({ error: e.code }));
    socket.on('message', (msg) => {
      if (msg.readUInt16BE(0) === id) done({ rcode: msg[3] & 0xf, answers: answersOf(msg) });
    });
    const labels = name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')]));
    const header = Buffer.alloc(12);
    header.writeUInt16BE(id, 0);
    header.writeUInt16BE(0x0100, 2); // recursion desired
    header.writeUInt16BE(1, 4);
    const query = Buffer.concat([header, ...labels, Buffer.from([0, 0, 1, 0, 1])]);
    // Connected, so that an ICMP "port unreachable" comes back as ECONNREFUSED.
    socket.connect(53, server, () => socket.send(query));
  });
}

if (role === 'serve') serve(args[0], args[1]);
else if (role === 'ask') {
  const lines = createInterface({ input: process.stdin });
  lines.on('line', async (line) => {
    const [name, server, timeoutMs] = line.trim().split(/\s+/);
    process.stdout.write(`${JSON.stringify(await ask(name, server, Number(timeoutMs ?? 2000)))}\n`);
  });
  process.stdout.write('ready\n');
} else {
  throw new Error(`dns-tool.mjs: unknown role ${role}`);
}
