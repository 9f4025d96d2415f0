// WWW-Authenticate parsing (RFC 7235 §4.1): one header may carry several
// challenges, and a quoted parameter may contain commas, as Docker Hub's
// `scope="repository:a/b:pull,push"` does. Kept apart from auth.ts because the
// error reader needs it too (a Bearer challenge may carry `error=`).

export interface Challenge {
  /** Lower case: `basic`, `bearer`. */
  scheme: string;
  /** Parameter names in lower case; values unquoted and unescaped. */
  params: Record<string, string>;
}

const TOKEN_CHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;

class Scanner {
  pos = 0;
  constructor(readonly s: string) {}

  get done(): boolean {
    return this.pos >= this.s.length;
  }

  peek(): string {
    return this.s.charAt(this.pos);
  }

  skip(chars: RegExp): void {
    while (!this.done && chars.test(this.peek())) this.pos++;
  }

  token(): string {
    const start = this.pos;
    while (!this.done && TOKEN_CHAR.test(this.peek())) this.pos++;
    return this.s.slice(start, this.pos);
  }

  until(stop: RegExp): string {
    const start = this.pos;
    while (!this.done && !stop.test(this.peek())) this.pos++;
    return this.s.slice(start, this.pos);
  }

  quoted(): string {
    this.pos++; // opening quote
    let out = '';
    while (!this.done && this.peek() !== '"') {
      if (this.peek() === '\\') this.pos++;
      out += this.s.charAt(this.pos++);
    }
    this.pos++; // closing quote (or past the end of an unterminated one)
    return out;
  }
}

/** Parses every challenge in one or more WWW-Authenticate header values. */
export function parseChallenges(headers: string | readonly string[] | undefined): Challenge[] {
  const values = headers === undefined ? [] : typeof headers === 'string' ? [headers] : headers;
  return values.flatMap(parseHeader);
}

function parseHeader(header: string): Challenge[] {
  const sc = new Scanner(header);
  const out: Challenge[] = [];
  while (!sc.done) {
    sc.skip(/[\s,]/);
    const scheme = sc.token();
    if (!scheme) {
      if (!sc.done) sc.pos++; // skip a stray character rather than loop on it
      continue;
    }
    const challenge: Challenge = { scheme: scheme.toLowerCase(), params: {} };
    out.push(challenge);
    readParams(sc, challenge.params);
  }
  return out;
}

/** Reads `name=value` pairs until the next challenge's scheme (a token with no "=" after it). */
function readParams(sc: Scanner, params: Record<string, string>): void {
  for (;;) {
    const save = sc.pos;
    sc.skip(/[\s,]/);
    const name = sc.token();
    sc.skip(/[ \t]/);
    if (!name || sc.peek() !== '=') {
      sc.pos = save;
      return;
    }
    sc.pos++;
    sc.skip(/[ \t]/);
    if (sc.peek() === '=' || sc.peek() === ',' || sc.done) {
      // token68 (`Basic dXNlcg==`): keep it whole under the empty name.
      sc.skip(/=/);
      params[''] = sc.s.slice(save, sc.pos).trim();
      continue;
    }
    // Unquoted values should be tokens; registries send bare URLs too, so read to the next separator.
    params[name.toLowerCase()] = sc.peek() === '"' ? sc.quoted() : sc.until(/[\s,]/);
  }
}
