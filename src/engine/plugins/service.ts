// Managed plugins (`docker plugin …`), as a daemon that has none answers for
// them: berth runs no plugins. A plugin is a rootfs run as a process that
// dockerd then calls over its socket for volumes, networks, logs or
// authorization; berth has none of those extension points, so it installs
// none. Every lookup finds nothing, with dockerd's words; what dockerd would
// honour (a pull of a plugin the registry has, a create from a tar) is refused
// as not implemented once the request has passed dockerd's own checks, so a
// client sees the same answer as from dockerd wherever dockerd would fail too.
import { EngineError, invalidParameter, noSuchPlugin, notImplemented } from '../../errors.js';
import { checkFilters, type Filters } from '../filters.js';
import { familiarString, parseReference, type Reference } from '../reference.js';
import type { AuthConfig } from '../registry/auth.js';
import type { RegistryClient } from '../registry/client.js';

export interface PluginServiceDeps {
  registry: Pick<RegistryClient, 'fetchDocument'>;
}

/** What `GET /plugins` lists: always none here. */
export type Plugin = never;

/** A remote reference as dockerd's parseRemoteRef reads it: with a digest, the tag is kept aside. */
interface RemoteRef {
  ref: Reference;
  tag: string | undefined;
}

const cannotRun = (what: string) =>
  notImplemented(`berth runs no plugins: ${what} is not supported (it has no plugin runtime)`);

export class PluginService {
  constructor(private readonly deps: PluginServiceDeps) {}

  /** dockerd's List: its two filters checked (enabled must say true or false), then the plugins: none. */
  list(filters: Filters): Plugin[] {
    checkFilters(filters, ['enabled', 'capability']);
    const enabled = filters.enabled;
    if (enabled?.length && !enabled.includes('true') && !enabled.includes('false')) {
      throw invalidParameter(`invalid filter 'enabled=[${enabled.join(' ')}]'`);
    }
    return [];
  }

  /** Inspect, remove, enable, disable, set and push all look the plugin up first: it is not there. */
  find(name: string): never {
    throw noSuchPlugin(name);
  }

  /** `GET /plugins/privileges`: what installing `remote` would grant. Only a plugin the registry has gets this far. */
  async privileges(remote: string, auth: AuthConfig | undefined, signal?: AbortSignal): Promise<never> {
    const { ref } = remoteRef(remote);
    await this.resolve(ref, auth, signal);
    throw cannotRun(`installing ${familiarString(ref)}`);
  }

  /** `POST /plugins/pull`: the names checked as dockerd checks them, the registry asked, then refused. */
  async pull(remote: string, name: string, auth: AuthConfig | undefined, signal?: AbortSignal): Promise<never> {
    const r = remoteRef(remote);
    const local = localName(r, name);
    await this.resolve(r.ref, auth, signal);
    throw cannotRun(`installing ${local}`);
  }

  /** The registry's answer for `ref`: its refusal in dockerd's words for a plugin's, or nothing. */
  private async resolve(ref: Reference, auth: AuthConfig | undefined, signal: AbortSignal | undefined): Promise<void> {
    try {
      await this.deps.registry.fetchDocument(ref, auth, { signal });
    } catch (e) {
      if (!(e instanceof EngineError)) throw e;
      throw new EngineError(e.kind, `error resolving plugin reference: ${e.message}`, { cause: e });
    }
  }

  /** `POST /plugins/{name}/upgrade`: the plugin to upgrade is looked up by its local name, tag added. */
  upgrade(remote: string, name: string): never {
    throw noSuchPlugin(localName(remoteRef(remote), name));
  }

  /** `POST /plugins/create`: the name must be a reference without a digest; a plugin is never made from the tar. */
  create(name: string): never {
    let ref: Reference;
    try {
      ref = parseReference(name, { defaultTag: false });
    } catch (e) {
      throw invalidParameter(`failed to parse reference ${name}: ${(e as Error).message}`);
    }
    if (ref.digest) throw invalidParameter('canonical references are not permitted');
    throw cannotRun(`creating plugin ${ref.familiar}:${ref.tag ?? 'latest'}`);
  }
}

/** dockerd's parseRemoteRef: no tag means `latest`; a tag beside a digest is kept apart from the reference. */
function remoteRef(remote: string): RemoteRef {
  const ref = parseReference(remote, { defaultTag: false });
  if (ref.digest) return { ref: { ...ref, tag: undefined }, tag: ref.tag };
  return { ref: ref.tag ? ref : { ...ref, tag: 'latest' }, tag: undefined };
}

/** dockerd's getName: the local name a plugin would get, from `name` or else from the remote. */
function localName({ ref, tag }: RemoteRef, name: string): string {
  if (name === '') {
    if (ref.digest) return `${ref.familiar}:${tag ?? 'latest'}`;
    return `${ref.familiar}:${ref.tag}`;
  }
  const local = parseReference(name, { defaultTag: false });
  if (local.digest) throw invalidParameter('cannot use digest in plugin tag');
  return local.tag ? name : `${local.familiar}:latest`;
}
