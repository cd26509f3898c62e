# The licence notices of the system libraries a binary links, sourced by images.sh and
# release.sh: glibc (LGPL), libgcc and libopus (BSD) travel with the binaries, and so must
# their notices.
#
#   copy_notices DEST LIBRARY…   copies each library's Debian copyright file (the package
#                                dpkg names for it) to DEST/<package>.copyright; fails
#                                naming a library whose notice it cannot find.
copy_notices() {
  local dest=$1 lib package
  shift
  mkdir -p "$dest"
  for lib in "$@"; do
    package=$(dpkg -S "*/$(basename "$lib")" 2>/dev/null | awk -F: 'NR == 1 {print $1}' || true)
    if [ -z "$package" ] || [ ! -f "/usr/share/doc/$package/copyright" ]; then
      echo "!! no licence notice found for $lib (dpkg -S names no package with a copyright file)" >&2
      return 1
    fi
    cp "/usr/share/doc/$package/copyright" "$dest/$package.copyright"
  done
}
