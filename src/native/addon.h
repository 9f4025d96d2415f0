// The bindings each file of the addon defines; addon.c registers them.
#ifndef BERTH_ADDON_H
#define BERTH_ADDON_H

#include <node_api.h>

#define BINDING(name) napi_value name(napi_env env, napi_callback_info info)

// mounts.c
BINDING(js_mount);
BINDING(js_umount2);
BINDING(js_umount2_async);
BINDING(js_is_mount_root);
// hash.c
BINDING(js_sha256_new);
BINDING(js_sha256_update);
BINDING(js_sha256_digest);
// xattrs.c
BINDING(js_lsetxattr);
BINDING(js_lgetxattr);
BINDING(js_llistxattr);
// files.c
#define READ_FILES_FIELDS 10
BINDING(js_read_files);
BINDING(js_mknod);
BINDING(js_create_file_at);
BINDING(js_flock);
BINDING(js_add_inode_flags);
// rooted.c
BINDING(js_openat2);
BINDING(js_readlink_at);
BINDING(js_root_view);
// spawn.c
BINDING(js_spawn_detached);
BINDING(js_pipe);
BINDING(js_signal_process);
BINDING(js_sealed_copy);
BINDING(js_x32_abi);
// memory.c
BINDING(js_malloc_trim_async);
BINDING(js_malloc_thresholds);
BINDING(js_release_file_mapped_pages);
// sockets.c
BINDING(js_unread_bytes);
BINDING(js_peer_closed);
BINDING(js_set_send_buffer);
BINDING(js_seqpacket_connect);
BINDING(js_seqpacket_pair);
BINDING(js_seqpacket_open);
BINDING(js_seqpacket_set_reading);
BINDING(js_seqpacket_write);
BINDING(js_seqpacket_shutdown);
BINDING(js_seqpacket_close);
// netlink.c
BINDING(js_netlink_open);
BINDING(js_netlink_request);
BINDING(js_netns_open_write);

#endif
