/*
 * Debian's libopenmpi-dev installs ompi/op/op.h, which includes this
 * header, without installing it. Open MPI builds where Fortran INTEGER and
 * C int have one size (this one: checked in coll_zcopy_host.c) convert
 * between them by identity; that is all op.h asks of it.
 */
#ifndef ZCOPY_COMPAT_FINT_2_INT_H
#define ZCOPY_COMPAT_FINT_2_INT_H

#define OMPI_INT_2_FINT(a) (a)
#define OMPI_FINT_2_INT(a) (a)

#endif
