/* placeholder */
extern int kvs_placeholder_copy_cuda;
