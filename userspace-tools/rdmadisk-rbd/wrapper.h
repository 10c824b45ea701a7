#include <rados/librados.h>
#include <rbd/librbd.h>
