// berth's native addon: the few system calls Node lacks (mount, mknod, the
// l*xattr family, statx, flock, posix_spawn with a pidfd, SOCK_SEQPACKET,
// rtnetlink sockets in another network namespace, malloc_trim, openat2 and a private
// mount namespace for docker cp) and a sha256 that runs off
// the event loop. Each concern has its file; this one
// names what JS sees. Errors are JS errors carrying the errno name in `code`,
// like Node's own fs errors, so callers can branch on it (args.c).
#include "addon.h"

#define EXPORT(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default, NULL}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    EXPORT("mount", js_mount),
    EXPORT("umount2", js_umount2),
    EXPORT("umount2Async", js_umount2_async),
    EXPORT("isMountRoot", js_is_mount_root),
    EXPORT("sha256New", js_sha256_new),
    EXPORT("sha256Update", js_sha256_update),
    EXPORT("sha256Digest", js_sha256_digest),
    EXPORT("lsetxattr", js_lsetxattr),
    EXPORT("lgetxattr", js_lgetxattr),
    EXPORT("llistxattr", js_llistxattr),
    EXPORT("readFiles", js_read_files),
    EXPORT("mknod", js_mknod),
    EXPORT("createFileAt", js_create_file_at),
    EXPORT("flock", js_flock),
    EXPORT("addInodeFlags", js_add_inode_flags),
    EXPORT("openat2", js_openat2),
    EXPORT("readlinkAt", js_readlink_at),
    EXPORT("rootView", js_root_view),
    EXPORT("spawnDetached", js_spawn_detached),
    EXPORT("pipe", js_pipe),
    EXPORT("signalProcess", js_signal_process),
    EXPORT("sealedCopy", js_sealed_copy),
    EXPORT("x32Abi", js_x32_abi),
    EXPORT("unreadBytes", js_unread_bytes),
    EXPORT("peerClosed", js_peer_closed),
    EXPORT("setSendBuffer", js_set_send_buffer),
    EXPORT("seqpacketConnect", js_seqpacket_connect),
    EXPORT("seqpacketPair", js_seqpacket_pair),
    EXPORT("seqpacketOpen", js_seqpacket_open),
    EXPORT("seqpacketSetReading", js_seqpacket_set_reading),
    EXPORT("seqpacketWrite", js_seqpacket_write),
    EXPORT("seqpacketShutdown", js_seqpacket_shutdown),
    EXPORT("seqpacketClose", js_seqpacket_close),
    EXPORT("netlinkOpen", js_netlink_open),
    EXPORT("netlinkRequest", js_netlink_request),
    EXPORT("netnsOpenWrite", js_netns_open_write),
    EXPORT("mallocTrimAsync", js_malloc_trim_async),
    EXPORT("mallocThresholds", js_malloc_thresholds),
    EXPORT("releaseFileMappedPages", js_release_file_mapped_pages),
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  napi_value fields;
  napi_create_int32(env, READ_FILES_FIELDS, &fields);
  napi_set_named_property(env, exports, "READ_FILES_FIELDS", fields);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
