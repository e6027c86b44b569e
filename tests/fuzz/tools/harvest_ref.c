/* Graph JSON seeds for fuzz_ref from the reference executor's unit tests: linked into
 * tests/unit/test_ref.c with -Wl,--wrap=kiln_ref_eval, it writes each graph the tests
 * evaluate to $HARVEST/unit-NNN.json, with the tests' dim values ("fuzz_dims") and the
 * first 64 values of each input ("fuzz_values"), which fuzz_ref reads. See seeds.sh. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

int __real_kiln_ref_eval(const char *, const kiln_ref_dim *, int, kiln_ref_buffer *, int, kiln_err *);

int __wrap_kiln_ref_eval(const char *g, const kiln_ref_dim *d, int nd, kiln_ref_buffer *b, int nb,
                         kiln_err *e) {
  static int n;
  char path[4096];
  snprintf(path, sizeof path, "%s/unit-%03d.json", getenv("HARVEST"), n++);
  json_t *root = g ? json_loads(g, 0, NULL) : NULL;
  char *txt = NULL;
  if (json_is_object(root)) {
    json_t *fd = json_object();
    for (int i = 0; i < nd; i++) json_object_set_new(fd, d[i].name, json_integer(d[i].value));
    if (nd) json_object_set_new(root, "fuzz_dims", fd);
    else json_decref(fd);
    json_t *ts = json_object_get(root, "tensors");
    for (size_t i = 0; i < json_array_size(ts); i++) {
      json_t *t = json_array_get(ts, i), *u = json_object_get(t, "uid");
      const char *role = json_string_value(json_object_get(t, "role"));
      if (!role || !strcmp(role, "output")) continue;
      for (int k = 0; k < nb; k++) {
        if (!json_is_integer(u) || b[k].uid != json_integer_value(u) || !b[k].data) continue;
        json_t *a = json_array();
        for (size_t j = 0; j < b[k].numel && j < 64; j++) {
          double v = b[k].data[j];
          json_array_append_new(a, isnan(v)   ? json_string("nan")
                                   : isinf(v) ? json_string(v > 0 ? "inf" : "-inf")
                                              : json_real(v));
        }
        json_object_set_new(t, "fuzz_values", a);
      }
    }
    txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
  }
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(txt ? txt : g ? g : "", f);
    fclose(f);
  }
  free(txt);
  json_decref(root);
  return __real_kiln_ref_eval(g, d, nd, b, nb, e);
}
