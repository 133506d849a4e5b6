/*
 * The identity of an emulated device, shared by the emulated CUDA driver and the emulated NVML
 * library, which are separate libraries: device `ordinal`'s UUID (cuDeviceGetUuid's 16 bytes,
 * NVML's "GPU-..." text of them) and its PCI bus id. The NVML library lists the devices in
 * the reverse order of the CUDA driver's ordinals, as a machine's NVML may (it enumerates by
 * PCI bus, CUDA by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID), so a device matched by index
 * is the wrong one and a test can tell.
 */
#ifndef EMU_IDS_H
#define EMU_IDS_H

#include <stdio.h>

/* Device `ordinal`'s UUID: fixed bytes, a version-4 layout, the ordinal last. */
static inline void emu_device_uuid(int ordinal, unsigned char out[16]) {
    static const unsigned char base[16] = {0xe3, 0x1d, 0x0c, 0x5a, 0x7b, 0x21, 0x4e, 0x10,
                                           0x9a, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    for (int i = 0; i < 16; i++) out[i] = base[i];
    out[15] = (unsigned char)ordinal;
}

/* Its PCI bus number: the bus id reads "0000:%02X:00.0" as cuDeviceGetPCIBusId writes it. */
static inline int emu_device_pci_bus(int ordinal) { return 0x41 + ordinal; }

#endif /* EMU_IDS_H */
